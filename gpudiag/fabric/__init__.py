"""The fabric between the nodes: the topology of each rail plane (switches, the links between
them, where each node is cabled), the equal-cost paths of a pair, the screen that loads every
switch link, and the attribution that names a slow switch link or switch from the pair tests."""
