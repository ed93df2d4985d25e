package sleep

import "time"

func bad() {
	time.Sleep(time.Millisecond) // want `R2: time.Sleep`
}

func allowed() {
	//saltus:allow R2 an example: not on a loop, and no event to wait for
	time.Sleep(time.Millisecond)
	t := time.NewTimer(time.Millisecond)
	<-t.C
}
