//go:build !race

package kvtransfer

const raceEnabled = false
