"""The built-in metric families: each module declares its specs at import and tees one kind
of logged data into them. They are entry points of the core distribution, loaded like any
third-party family."""
