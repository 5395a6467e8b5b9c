"""What a sweep shows: the initialization-memory report, its files and plots, and the paper's findings."""
