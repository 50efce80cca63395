"""The culler's judgement (pure): is this server idle? (:mod:`.idleness`), one GPU's
readings folded into the summary it reads (:mod:`.tracker`), and which credential reaches
a user's server (:mod:`.access`)."""
