"""The session: a run folder planned (`runfolder`), its jobs prepared and started in plan order (`runner`, `job`),
how each ended (`classify`), what the rows give together (`derive`), what this machine can run (`capabilities`),
the compile cache warmed untimed (`compile_cache`), the user's models checked (`model_check`), signals (`stopping`)
and the opening every run-like command shares (`opening`)."""
