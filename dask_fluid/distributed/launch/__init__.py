"""Placing programs and data on Dask workers, and watching them run."""
