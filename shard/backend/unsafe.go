package backend

import "unsafe"

// b2s views b as a string without copying; the string must not outlive b
// nor be kept while b changes. The package's only zero-copy conversion
// (CONVENTIONS.md: they live in one file).
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
