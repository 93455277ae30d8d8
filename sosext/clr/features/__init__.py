"""BCL and runtime features read from the heap: tasks and async stacks, timers, the thread
pool and its queue, concurrent collections, HTTP requests, delegates."""
