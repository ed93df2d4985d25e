package chat

import "unsafe"

// The package's only zero-copy conversions (CONVENTIONS.md § Hot path: they live in
// one file). Render and ParseMessages append the texts they build to one
// local byte arena and hand out strings into it: one allocation per call
// instead of one per message. This is safe because an arena is
// append-only: a byte is never written again once a string covers it, and
// when append moves the arena, the strings keep the old array alive.

// arenaString returns the bytes b[start:] as a string without copying.
// Those bytes must never be written again.
func arenaString(b []byte, start int) string {
	if start == len(b) {
		return ""
	}
	return unsafe.String(&b[start], len(b)-start)
}

// viewString returns b as a string without copying, for Scratch's views:
// the caller promises not to use the string once b's owner reuses it.
func viewString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
