"""Threads and what runs on them: managed stacks, frames, raw and native stacks, exceptions,
the crash record and the stress log."""
