"""All-reduce for NCCL2 mode: a ring over Dask comms or TCP on CPUs, NCCL through CuPy on GPUs."""
