"""One module per data set, each with `load(spec, rank) -> DataBundle`; `worker.data.load` picks one."""
