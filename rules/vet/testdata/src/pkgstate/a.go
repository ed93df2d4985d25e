package pkgstate

import "errors"

var (
	ErrGone = errors.New("gone") // a sentinel error: never written
	count   int
	byName  = map[string]int{}
	list    []int
	cfg     struct{ n int }
	ptr     = &struct{ n int }{}
)

func init() {
	count = 1 // init may fill the package's tables
}

func bad() {
	count++         // want `R12: the package-level variable count is written at run time`
	count = 2       // want `R12: the package-level variable count is written at run time`
	byName["a"] = 1 // want `R12: the package-level variable byName is written at run time`
	list[0] = 1     // want `R12: the package-level variable list is written at run time`
	cfg.n = 1       // want `R12: the package-level variable cfg is written at run time`
}

func good() int {
	count := 3 // a local that shadows it
	count++
	ptr.n = 1 // through a pointer: the pointee is not the variable (review's business)
	//saltus:allow R12 an example with its reason
	byName["b"] = 2
	return count + len(list) + cfg.n
}
