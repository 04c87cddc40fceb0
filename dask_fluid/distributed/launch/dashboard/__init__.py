"""Watching jobs on the Dask dashboard: a scheduler plugin and the page it serves.

:mod:`.plugin` keeps every job's progress on the scheduler (from the events the job already
publishes) and registers :mod:`.page` on the scheduler's own dashboard server.
"""
