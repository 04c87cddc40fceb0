"""Tests of fluid.contrib."""
