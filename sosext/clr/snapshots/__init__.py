"""Heap snapshots (from cores and from EventPipe gcdumps) and their differences."""
