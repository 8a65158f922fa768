"""Many runs: sweep files and their grid (:mod:`~noisylabels.sweep.grid`), launching the runs
locally or as a SLURM job array (:mod:`~noisylabels.sweep.launch`), and ``noisylabels sweep``
(:mod:`~noisylabels.sweep.cli`)."""
