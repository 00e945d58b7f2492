"""Concepts shared by every Kora component: memory event types and environment-variable naming.

Everything here is dependency-light (pydantic only) so any component can import it cheaply.
"""
