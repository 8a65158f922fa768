"""Finished runs: collecting their ``results.json`` into cells (:mod:`~noisylabels.report.collect`),
rendering tables and the bias figure (:mod:`~noisylabels.report.render`), the paper's loss figures
(:mod:`~noisylabels.report.plot`), and ``noisylabels report`` (:mod:`~noisylabels.report.cli`)."""
