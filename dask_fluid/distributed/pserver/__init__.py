"""Fluid's parameter server (``listen_and_serv``) and the trainer side that talks to it."""
