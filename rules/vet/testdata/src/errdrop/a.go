package errdrop

import "errors"

func f() error        { return errors.New("x") }
func g() (int, error) { return 0, nil }
func h() int          { return 0 }
func two() (int, int) { return 0, 0 }

func bad() {
	_ = f()    // want `R5: an error dropped without a comment`
	_, _ = g() // want `R5: an error dropped without a comment`
}

func good() error {
	_ = f() // the example's error: nothing to lose
	// a comment above works too
	_, _ = g()
	_ = h()
	_, _ = two()
	if err := f(); err != nil {
		return err
	}
	n, err := g()
	_ = n
	return err
}
