"""The HTTP API: ``create_app(rag, config)`` → FastAPI. Routes are thin; the library does the work."""

from .app import create_app

__all__ = ["create_app"]
