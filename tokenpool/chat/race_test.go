//go:build race

package chat

// raceEnabled shortens the property tests under the race detector, which
// slows tokenization about tenfold; the plain run covers the full count.
const raceEnabled = true
