package tree

import "testing"

// FuzzOracle decodes the input as operations and compares the tree with the
// naive model (capacity never binds; holder cap 2).
func FuzzOracle(f *testing.F) {
	f.Add([]byte{0, 5, 1, 2, 1, 0, 1, 0, 1, 5, 1, 2, 1, 0, 1, 1})
	f.Add([]byte{0, 13, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 2, 3, 9, 0, 0, 2, 0, 4, 200, 1, 13})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		runOracle(t, decodeOps(data, 5), 2)
	})
}

// FuzzCapacity decodes the input as operations on a small tree and checks
// structural invariants and that every hit is backed by a real insert.
func FuzzCapacity(f *testing.F) {
	f.Add(byte(5), []byte{0, 5, 1, 2, 1, 0, 1, 0, 1, 5, 1, 2, 1, 0, 1, 1})
	f.Fuzz(func(t *testing.T, maxBlocks byte, data []byte) {
		if len(data) > 4096 {
			return
		}
		runCapacity(t, decodeOps(data, 5), int(maxBlocks%40)+1)
	})
}
