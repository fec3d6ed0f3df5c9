"""Serving a program: load it with its defaults, save and read program files, the shipped
programs, many questions at once, the registry of systems."""
