package tree

// Pinned block keys for TestBlockKeysGolden (see there).
var (
	golden16 = []uint64{0x549e1145f216c681, 0xa08347ac01309ab2}
	golden7  = []uint64{0xfa19804993522473, 0xc1ab6fd47841274c, 0xc96d754a6bd6acec, 0x3f8a76423a8460a1, 0x733b5634b1a6eade}
	golden40 = []uint64{0xaf4800d5ee126c31}
)
