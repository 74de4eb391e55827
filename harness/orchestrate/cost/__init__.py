"""What a run costs before it runs: the arithmetic of an estimate (`estimate`) and its prices from this machine's
past run folders or stated defaults (`pricing`)."""
