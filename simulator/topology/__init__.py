"""Cluster -> NetworkX graph, and routes between GPUs over it."""
from .graph import Topology, build_topology
from .routing import route

__all__ = ["Topology", "build_topology", "route"]
