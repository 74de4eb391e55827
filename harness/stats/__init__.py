"""Pure statistics over sequences of floats (numpy and scipy; nothing of nvbench): `window` for one
measured window, `inference` for comparing runs. Every function validates its input and raises
ValueError naming the argument, and its docstring states the method and its reference."""
