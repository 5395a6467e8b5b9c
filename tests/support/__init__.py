"""What several test files share: run settings and the CLI's command line, hand-made records, servers, long commands,
and the small plugins and progress objects the tests load."""
