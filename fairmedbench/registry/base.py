"""The generic Registry (defined in fairmedbench._registry so that metrics/ can use it too)."""

from fairmedbench._registry import Registry

__all__ = ["Registry"]
