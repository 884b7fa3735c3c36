package p

type T struct{ Field, field int }

func (T) M() {}
func (T) m() {}
func (t) M() {}
func F()     {}
func f()     {}

type t struct{}

const C, c = 1, 2

var V1, V2 = 1, 2
