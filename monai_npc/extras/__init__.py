"""Extras: experiments that re-use the NPC primitives outside image registration.

``qho``: recover the eigenstates and energies of an unknown Hamiltonian (the 1-D quantum harmonic
oscillator) from time-evolved wavefunction pairs (paper Section "Quantum Harmonic Oscillator").
"""
