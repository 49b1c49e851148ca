"""Helpers the tests share: machine requirements, a task factory, a config factory, fake endpoints.

Test modules import from here instead of from each other or from a conftest.
"""
