"""The hooks a plugin implements. Each one *registers* named components; none builds them.

Every hook receives ``register(name, factory, description, *, default=False, **declared)``
(``initmem_core.contracts.Register``):

- ``name``: what users type (``--opt lion``). A name ending in ``:*`` registers a family:
  ``timm:*`` answers to every ``timm:<variant>`` and the factory receives ``variant=``.
- ``factory``: a callable, or an import string ``"package.module:function"`` that is resolved
  only when the component is built, so listing plugins and validating names import no torch.
  It is called with keyword arguments only, and only with those its signature accepts; what it
  receives and returns is the kind's contract (``initmem_core.contracts`` for a run's kinds).
- ``description``: one line shown by ``initmem plugins``.
- ``default``: for metrics, computed in every run whatever ``--metric`` says (the built-in
  weight norms, interpolation and best-validation selection are).
- ``**declared``: what a kind declares beside its factory: an optimizer's
  ``contracts.OptimizerInfo`` fields, an architecture's ``contracts.ArchitectureInfo``, a claim's
  ``contracts.ClaimInfo`` fields.

Each hook is called once per plugin, one implementation at a time, and what each registers is
collected separately; so pluggy's ordering and wrapping (``tryfirst``, ``hookwrapper``) mean
nothing here. Implementations may accept a subset of a hook's arguments, so hooks can grow
without breaking plugins. The hooks are made from the table in ``initmem_core.kinds``, one per
kind, with the config field and flag that select it, its contract and its info record. Claims
and presets are kinds no run selects: every registered claim is evaluated on a sweep's report,
and a preset is a sweep file; a command is an ``initmem`` subcommand.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable

import pluggy

from initmem_core.contracts import Register
from initmem_core.kinds import PLUGIN_KINDS, ComponentKind

PROJECT_NAME = "initmem"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

#: What each kind's hook is for, by kind: its docstring, whose example gains the ``@hookimpl`` and
#: ``def`` lines of the hook it implements.
DOCS = {
    "architecture": """Register model architectures (``--arch``): factories following
    ``initmem_core.contracts.ArchitectureFactory`` (an untrained model; ``--init`` rescales its
    kernels by sigma); ``fused=`` may name its fused form (``contracts.ArchitectureInfo``).

    Example::

        register("mlp", "my_models.mlp:build_mlp", "Two-layer MLP on flattened pixels")""",
    "optimizer": """Register optimizers (``--opt``): factories following ``initmem_core.contracts.OptimizerFactory``,
    with their ``defaults`` and ``clock`` declared as ``register`` keywords
    (``initmem_core.contracts.OptimizerInfo``).

    Example::

        register("lion", "my_lion.optim:build_lion", "Lion: sign of interpolated momentum",
                 defaults={"lr": 1e-4, "betas": (0.9, 0.99)}, clock="lr")""",
    "initializer": """Register initializers (``--init``), where sigma_w enters a run: factories following
    ``initmem_core.contracts.InitializerFactory``, *paired* so that sigma is the only thing that
    changes across a sweep.

    Example::

        register("orthogonal", "my_inits:orthogonal", "sigma x orthogonal kernels")""",
    "regularizer": """Register explicit regularizers (``--reg``, strength ``--l2``): factories following
    ``initmem_core.contracts.RegularizerFactory``, returning a ``contracts.Regularizer``.

    Example::

        register("l1", "my_regs:L1Penalty", "lambda * ||W||_1")""",
    "metric": """Register metrics (``--metric``): factories following ``initmem_core.contracts.MetricFactory``,
    returning an object with ``compute(state)`` (``contracts.EpochMetric``: at initialization, epoch
    0, and at every evaluation point) and/or ``summarize(history)`` (``contracts.SummaryMetric``:
    once, at the end). Returned names become MLflow metrics. Optional too:
    ``artifacts() -> dict[str, str]``, text files logged with the run at its end (``weight-norms``
    writes ``layer_norms.csv``); ``take_selected(predictor)``, given the run's
    ``SelectedPredictor`` once, before ``summarize``; and, for a metric that accumulates across
    epochs, ``state_dict()``/``load_state_dict(state)`` of plain data and tensors, saved in every
    checkpoint so that a resumed run continues it (without them, its attributes are saved when
    they are plain data). Keep large accumulations in tensors: they are packed into the
    checkpoint in one piece, where Python lists are pickled value by value at every epoch.

    Example::

        register("effective-rank", "my_metrics:EffectiveRank", "Effective rank per layer")""",
    "dataset": """Register datasets (``--data``): factories following ``initmem_core.contracts.DatasetFactory``,
    returning a ``contracts.DatasetBundle``. Splits must be a pure function of
    ``config.data_seed`` so that every sigma sees the same data. Keyword arguments of ``register``
    (``initmem_core.contracts.DatasetInfo``): ``shape``, ``classes`` and ``splits`` (train,
    validation, test), which let a run's ``--until`` epochs be planned and a dry run size a
    dataset that is not on its machine; ``files``, (file name, md5) pairs that recognise its
    files, so that ``--data-dir`` holding another dataset's files is refused in one line (files
    matching no declared checksum, stand-ins, are read as they are).

    Example::

        register("svhn", "my_data.svhn:load_svhn", "SVHN from --data-dir",
                 shape=(3, 32, 32), classes=10, splits=(68_257, 5_000, 26_032),
                 files=(("train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373"),))""",
    "claim": """Register claims: statements a sweep's report decides (``initmem report``, a sweep's parent run).

    The factory is the claim's evaluator (the sweep view to a ``Finding``, written with
    ``initmem_core.report.claim_api``: ``per_stratum``, ``difference``, the verdict rule and the
    regime checks) and the description its statement; what it declares beside them are
    ``register`` keywords (``initmem_core.contracts.ClaimInfo``), which the view it reads carries.
    A claim that raises is reported as failed, with its error and its plugin; the other claims are
    unaffected. The paper's claims are the built-in plugin ``claims`` (``INITMEM_LOAD_PLUGINS``
    can leave it out).

    Example::

        register("lion_forgets", "my_claims:lion_forgets", "Lion forgets sigma like Adam",
                 axis=("opt", "lr"), clock="clock_adapt", threshold=3.0, source="my note, 2026")""",
    "preset": """Register sweep presets (``initmem sweep --preset NAME``, ``initmem presets``).

    The factory is the path of a sweep file (TOML, as ``--config`` reads it), as a string; the
    description is left empty to take the file's opening comment. A package ships its presets as
    package data and registers the folder in one call with
    ``initmem_core.sweep.presets.register_folder``.

    Example::

        register("lion-mini", str(files("my_claims") / "presets" / "lion-mini.toml"))""",
    "figure": """Register report figures: drawn into every sweep report's folder (``initmem report``, a
    sweep's end) beside the tables, and logged on the parent run under ``report/``.

    The factory draws one figure (``initmem_core.report.figures.FigureFactory``: called with
    ``report`` and ``path``, it writes the figure to ``path`` and returns it, or ``None`` when the
    report lacks what it needs); what it declares beside it are ``register`` keywords
    (``initmem_core.contracts.FigureInfo``: ``file``, default ``<name>.png``; ``warm_up``). A figure
    that raises is left out with a one-line warning; the other files are still written. The
    report's own figures are the built-in plugin ``figures`` (``INITMEM_LOAD_PLUGINS`` can leave
    it out: the report is then written without them).

    Example::

        register("sharpness_vs_sigma", "my_figures:sharpness_vs_sigma", "Sharpness against sigma, per group",
                 file="sharpness_vs_sigma.png")""",
    "executor": """Register sweep executors (``initmem sweep --executor NAME``): where a sweep's cells run.

    The factory follows ``initmem_core.sweep.executor.ExecutorFactory``: from the executor options
    the sweep was given it builds an ``Executor`` of that module, whose ``run(cells, sweep)`` runs
    each cell (``run_cell``) and submits and closes it through ``sweep``, which keeps the parent
    run, the child runs, resuming and the report. What it declares beside the factory are
    ``register`` keywords (``initmem_core.contracts.ExecutorInfo``): the optional packages it
    needs, the command that installs them, and the executor options it takes. The built-in
    ``local``, ``ray`` and ``slurm`` are the plugin ``executors`` (``INITMEM_LOAD_PLUGINS`` can
    leave it out).

    Example::

        register("k8s", "my_k8s.executor:KubernetesExecutor", "each cell a Kubernetes Job",
                 needs=("kubernetes",), install="pip install my-k8s-executor",
                 options=("cpus_per_cell", "gpus_per_cell"))""",
    "command": """Register ``initmem`` subcommands (``initmem NAME``), in the manner of simonw/llm's
    ``register_commands``. The factory is a function Typer makes the command of
    (``initmem_core.contracts.CommandFunction``: its parameters the command's arguments and
    options, its docstring the help); it is imported when the command is listed or run, so keep
    heavy imports inside it. An ``InitmemError`` it raises is one line and exit 2. A name the
    ``initmem`` command already has is refused with a warning. ``initmem new-plugin``, ``clean`` and
    ``sync`` are the built-in plugin ``commands`` (``INITMEM_LOAD_PLUGINS`` can leave it out).

    Example::

        register("sharpness", "my_tools.cli:sharpness", "Sharpness of a run's selected weights")""",
}


def _hookspec(kind: ComponentKind) -> Callable[[Register], None]:
    """The hook spec of ``kind``: what pluggy checks implementations against and calls."""

    def hook(register: Register) -> None: ...

    doc, _, example = inspect.cleandoc(DOCS[kind.name]).partition("\n\nExample::\n\n")
    implemented = f"@hookimpl\ndef {kind.hook}(register: Register) -> None:\n{example}"
    hook.__name__ = hook.__qualname__ = kind.hook
    hook.__doc__ = f"{doc}\n\nExample::\n\n{textwrap.indent(implemented, '    ')}\n"
    return hookspec(hook)


#: One hook per kind (``initmem_register_<kind>s``), in the table's order; pluggy reads them from here.
HOOKS = {kind.hook: _hookspec(kind) for kind in PLUGIN_KINDS}
globals().update(HOOKS)
