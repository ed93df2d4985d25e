//go:build race

package openai

// raceBuild: the tests run under the race detector, whose instrumentation
// allocates more than a plain build (TestDecodeMemory's bound).
const raceBuild = true
