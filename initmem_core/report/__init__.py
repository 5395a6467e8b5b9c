"""What a sweep shows: the initialization-memory report, its files and plots, the parent run's
description, and the paper's findings."""
