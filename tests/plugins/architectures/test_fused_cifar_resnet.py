"""The fused model of K CIFAR ResNets (plugins/architectures/fused_cifar_resnet.py) computes what K separate
models do: the same K outputs, and after SGD steps with momentum and weight decay the same
parameters, BatchNorm statistics and momentum buffers, in fp32 to a tight tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from initmem_plugins.architectures.cifar_resnet import CifarResNet
from initmem_plugins.architectures.fused_cifar_resnet import FusedCifarResNet, lockstep_loss, merge_states, split_state
from initmem_plugins.initializers.fan_in import fan_in_init

SIGMAS = (0.5, 1.41, 2.0)  # each model its own initialization scale
BLOCKS = 1  # ResNet-8: a plain block, and both option-A shortcuts (stride 2, channels doubled)
BATCH = 8
SGD = dict(lr=0.05, momentum=0.9, weight_decay=5e-4)


def separate_models(device: str = "cpu") -> list[CifarResNet]:
    models = []
    for k, sigma in enumerate(SIGMAS):
        torch.manual_seed(100 + k)
        model = CifarResNet(BLOCKS)
        fan_in_init(model=model, sigma=sigma, generator=torch.Generator().manual_seed(k))
        models.append(model.to(device))
    return models


def batches(count: int, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    return [
        (
            torch.randn(BATCH, 3, 16, 16, generator=generator).to(device),  # any size: the pool is global
            torch.randint(0, 10, (BATCH,), generator=generator).to(device),
        )
        for _ in range(count)
    ]


def assert_close_states(fused_state, separate_states, what):
    for k, (got, expected) in enumerate(zip(fused_state, separate_states, strict=True)):
        assert got.keys() == expected.keys(), what
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-5, atol=1e-6, msg=f"{what} {key} of model {k}")


def test_merging_and_splitting_states_is_exact_and_the_models_differ():
    models = separate_models()
    fused = FusedCifarResNet.from_models(models, BLOCKS)
    back = split_state(fused.state_dict(), len(models))
    for model, state in zip(models, back, strict=True):
        assert state.keys() == model.state_dict().keys()
        assert all(torch.equal(state[key], value) for key, value in model.state_dict().items())
    stds = [model.conv1.weight.std().item() for model in models]
    assert stds == sorted(stds) and stds[2] > 3 * stds[0]  # each its own sigma, kept apart in the fused model


@pytest.mark.slow  # about 2-4 s of grouped convolutions on the CPU per layout
@pytest.mark.parametrize("channels_last", [False, True])
def test_fused_outputs_and_sgd_updates_equal_separate_models(channels_last):
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    models = separate_models()
    fused = FusedCifarResNet.from_models(models, BLOCKS).to(memory_format=memory_format)
    models = [model.to(memory_format=memory_format) for model in models]
    separate_optimizers = [torch.optim.SGD(model.parameters(), **SGD) for model in models]
    fused_optimizer = torch.optim.SGD(fused.parameters(), **SGD)
    for step, (x, y) in enumerate(batches(2)):
        x = x.contiguous(memory_format=memory_format)
        outputs = fused(x)
        separate = [model(x) for model in models]  # once: a forward in training mode updates BatchNorm
        expected = torch.stack(separate)
        assert outputs.shape == (len(SIGMAS), BATCH, 10)
        torch.testing.assert_close(outputs, expected, rtol=1e-5, atol=1e-5, msg=f"outputs at step {step}")
        fused_optimizer.zero_grad()
        lockstep_loss(outputs, y).backward()
        fused_optimizer.step()
        for output, optimizer in zip(separate, separate_optimizers, strict=True):
            optimizer.zero_grad()
            F.cross_entropy(output, y).backward()
            optimizer.step()
    # Parameters and BatchNorm statistics after two steps (the second one uses the momentum).
    assert_close_states(split_state(fused.state_dict(), len(models)), [m.state_dict() for m in models], "state")
    # Each model's own optimizer state: its momentum buffers, split out of the fused optimizer's.
    names = dict(fused.named_parameters())
    momenta = {name: fused_optimizer.state[p]["momentum_buffer"] for name, p in names.items()}
    separate_momenta = [
        {name: optimizer.state[p]["momentum_buffer"] for name, p in model.named_parameters()}
        for model, optimizer in zip(models, separate_optimizers, strict=True)
    ]
    assert_close_states(split_state(momenta, len(models)), separate_momenta, "momentum")
    # In evaluation mode too (the running statistics, per model).
    fused.eval()
    for model in models:
        model.eval()
    x = batches(1)[0][0].contiguous(memory_format=memory_format)
    torch.testing.assert_close(fused(x), torch.stack([model(x) for model in models]), rtol=1e-5, atol=1e-5)


def test_merge_states_inverts_split_state_for_gradients_too():
    models = separate_models()
    fused = FusedCifarResNet.from_models(models, BLOCKS)
    x, y = batches(1)[0]
    lockstep_loss(fused(x), y).backward()
    grads = {name: p.grad for name, p in fused.named_parameters()}
    again = merge_states(split_state(grads, len(models)))
    assert again.keys() == grads.keys() and all(torch.equal(again[k], grads[k]) for k in grads)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_outputs_equal_separate_models_on_cuda_in_fp32(kept_settings):
    from initmem_core.training.setup import use_precision

    use_precision("off")  # TF32 would round the two sides differently
    models = separate_models("cuda")
    fused = FusedCifarResNet.from_models(models, BLOCKS)
    x, _ = batches(1, "cuda")[0]
    torch.testing.assert_close(fused(x), torch.stack([model(x) for model in models]), rtol=1e-4, atol=1e-4)
