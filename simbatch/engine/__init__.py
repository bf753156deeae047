"""The SimPy engine: replicas stepping policies over a backend (see ``simulation.simulate``)."""
