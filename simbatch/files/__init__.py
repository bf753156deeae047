"""The files users give simbatch and the folders it writes: one loader of text and YAML
files, the checks on output paths, and where the bundled scenarios are.
"""
