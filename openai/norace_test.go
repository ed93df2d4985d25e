//go:build !race

package openai

// raceBuild: see race_test.go.
const raceBuild = false
