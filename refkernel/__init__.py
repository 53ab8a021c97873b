"""refkernel: the reference agent kernel, kstress's default system under test."""
