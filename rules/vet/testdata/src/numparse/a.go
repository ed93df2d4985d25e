package numparse

import "strconv"

func bad(s string) int {
	n, _ := strconv.Atoi(s)           // want `R14: strconv.Atoi's error is dropped`
	f, _ := strconv.ParseFloat(s, 64) // want `R14: strconv.ParseFloat's error is dropped`
	return n + int(f)
}

func good(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, err
	}
	//saltus:allow R14 an example: a zero is the right default here
	m, _ := strconv.Atoi(s)
	return n + m, nil
}
