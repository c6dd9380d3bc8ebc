"""The contract between server, worker and client: run spec, metric records, run-directory names, model configs.

Torch-free and server-free on purpose (a test enforces it): every part imports it, login nodes have no torch.
"""
