package gostmt

func work() {}

func bad() {
	go work()      // want `R1: a bare go statement`
	go func() {}() // want `R1: a bare go statement`
}

func allowed() {
	//saltus:allow R1 a stand-in for the supervisor in this example
	go work()
	go work() //saltus:allow R1 on the same line works too
}

func noReason() {
	//saltus:allow R1
	go work() // want `R1: an exception needs a reason`
}
