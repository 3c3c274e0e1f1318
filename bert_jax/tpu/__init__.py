"""TPU tools: AOT compilation for a slice from any machine (compile), the search over
meshes and remat policies (search), the slices known (topologies), and the
collectives counted in compiled HLO (collectives)."""
