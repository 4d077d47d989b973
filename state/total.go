package state

import (
	"math"
	"math/big"
	"math/bits"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Total is a sum of amounts, exact however many are added: a children's
// total of ten teams at MaxAmount is already beyond an int64. It is a
// 128-bit two's complement integer of milli-units; the zero value is 0.
type Total struct {
	hi int64
	lo uint64
}

// TotalOf is the amount as a Total.
func TotalOf(a Amount) Total {
	if a < 0 {
		return Total{hi: -1, lo: uint64(a)}
	}
	return Total{lo: uint64(a)}
}

// Add returns t + a; a may be negative.
func (t Total) Add(a Amount) Total { return t.Plus(TotalOf(a)) }

// Plus returns t + u.
func (t Total) Plus(u Total) Total {
	lo, carry := bits.Add64(t.lo, u.lo, 0)
	return Total{hi: t.hi + u.hi + int64(carry), lo: lo}
}

// Minus returns t - u.
func (t Total) Minus(u Total) Total {
	lo, borrow := bits.Sub64(t.lo, u.lo, 0)
	return Total{hi: t.hi - u.hi - int64(borrow), lo: lo}
}

// Equal reports whether t and u are the same number.
func (t Total) Equal(u Total) bool { return t == u }

// IsZero reports whether t is 0.
func (t Total) IsZero() bool { return t == Total{} }

// Cmp compares t and u: -1, 0 or +1.
func (t Total) Cmp(u Total) int {
	switch {
	case t.hi < u.hi:
		return -1
	case t.hi > u.hi:
		return 1
	case t.lo < u.lo:
		return -1
	case t.lo > u.lo:
		return 1
	}
	return 0
}

// Amount is t as an Amount, and whether it fits in one.
func (t Total) Amount() (Amount, bool) {
	if (t.hi == 0 && t.lo <= math.MaxInt64) || (t.hi == -1 && t.lo > math.MaxInt64) {
		return Amount(int64(t.lo)), true
	}
	return 0, false
}

// String formats t as a quantity, like Amount.String.
func (t Total) String() string {
	if a, ok := t.Amount(); ok {
		return a.String()
	}
	n := new(big.Int).Lsh(big.NewInt(t.hi), 64)
	n.Add(n, new(big.Int).SetUint64(t.lo))
	q, err := resource.ParseQuantity(n.String() + "m")
	if err != nil {
		return n.String() + "m"
	}
	return q.String()
}
