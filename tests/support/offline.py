"""Tests that must prove nothing reaches the network: every connection attempt fails the test."""

from __future__ import annotations

import socket

import pytest


def refuse_network(monkeypatch: pytest.MonkeyPatch, what: str = "the code under test") -> None:
    """From now on in this test, opening a connection or resolving a name is an AssertionError."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{what} reached for the network: {args!r}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
