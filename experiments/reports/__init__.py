"""Reports from finished work: the arena summary, its plots and tables, a program's prompts."""
