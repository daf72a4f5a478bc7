//go:build race

package bench

// raceEnabled: the race detector slows the tool 5-20x; the ceiling test
// then measures without holding the floor.
const raceEnabled = true
