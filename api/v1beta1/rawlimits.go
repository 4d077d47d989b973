package v1beta1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The limits of a spec (MaxBudgets and the rest, and the bounds of an
// amount) are checked here on raw JSON, for code that reads objects the API
// server has not validated, such as the webhook reading a review: before
// anything is decoded, a forged body of a few MiB could carry 50,000
// budgets, a name of 3 MiB or an amount of a billion digits. The walk takes
// valid JSON, does not decode it, stops at the first element past a limit,
// and reads every member that the typed decoding reads (the same key, exact
// case, escapes decoded) wherever it occurs, duplicates included: it
// refuses whatever the typed decoding could see, and maybe more, never
// less.

// ErrLimits is what every error of CheckSpecLimits and CheckObjectLimits is.
var ErrLimits = errors.New("the spec breaks the limits of an AcceleratorQuota")

type limitError struct{ msg string }

func (e *limitError) Error() string        { return e.msg }
func (e *limitError) Is(target error) bool { return target == ErrLimits }

func limitErr(format string, args ...any) error {
	return &limitError{fmt.Sprintf(format, args...)}
}

// CheckObjectLimits refuses an object (raw JSON) whose spec breaks the
// limits.
func CheckObjectLimits(raw []byte) error {
	return eachMember(raw, func(key, val []byte) error {
		if string(key) == "spec" {
			return CheckSpecLimits(val)
		}
		return nil
	})
}

// CheckSpecLimits refuses a spec (raw JSON) that breaks the limits.
func CheckSpecLimits(raw []byte) error {
	return eachMember(raw, func(key, val []byte) error {
		switch string(key) {
		case "budgets":
			if n := countElements(val, MaxBudgets+1); n > MaxBudgets {
				return limitErr("spec.budgets has more than %d budgets, the most the CRD allows (maxItems): keep at most %d, one per resourceName and resourceFlavor",
					MaxBudgets, MaxBudgets)
			}
			i := 0
			return eachElement(val, func(b []byte) error {
				defer func() { i++ }()
				return checkBudgetLimits(i, b)
			})
		case "goneClusters":
			if n := countElements(val, MaxGoneClusters+1); n > MaxGoneClusters {
				return limitErr("spec.goneClusters has more than %d entries, the most the CRD allows (maxItems): list each gone cluster once", MaxGoneClusters)
			}
			i := 0
			return eachElement(val, func(g []byte) error {
				defer func() { i++ }()
				return eachMember(g, func(key, val []byte) error {
					if string(key) == "name" {
						if n := longer(val, MaxClusterNameLength); n > 0 {
							return tooLong(fmt.Sprintf("spec.goneClusters[%d].name", i), n, MaxClusterNameLength)
						}
					}
					return nil
				})
			})
		case "parentRef":
			return eachMember(val, func(key, val []byte) error {
				if string(key) == "name" {
					if n := longer(val, MaxParentNameLength); n > 0 {
						return tooLong("spec.parentRef.name", n, MaxParentNameLength)
					}
				}
				return nil
			})
		}
		return nil
	})
}

// checkBudgetLimits refuses budget i of a spec (raw JSON) when it breaks
// the CRD's limits.
func checkBudgetLimits(i int, raw []byte) error {
	field := func(name string) string { return fmt.Sprintf("spec.budgets[%d].%s", i, name) }
	return eachMember(raw, func(key, val []byte) error {
		switch string(key) {
		case "resourceName":
			if n := longer(val, MaxResourceNameLength); n > 0 {
				return tooLong(field("resourceName"), n, MaxResourceNameLength)
			}
		case "resourceFlavor":
			if n := longer(val, MaxResourceFlavorLength); n > 0 {
				return tooLong(field("resourceFlavor"), n, MaxResourceFlavorLength)
			}
		case "nominal", "borrowingLimit", "lendingLimit":
			return badAmount(field(string(key)), val)
		case "perCluster":
			if n := countElements(val, MaxPerCluster+1); n > MaxPerCluster {
				return limitErr("%s has more than %d entries, the most the CRD allows (maxItems): keep at most %d, one per cluster",
					field("perCluster"), MaxPerCluster, MaxPerCluster)
			}
			j := 0
			return eachElement(val, func(c []byte) error {
				defer func() { j++ }()
				return eachMember(c, func(key, val []byte) error {
					switch string(key) {
					case "cluster":
						if n := longer(val, MaxClusterNameLength); n > 0 {
							return tooLong(field(fmt.Sprintf("perCluster[%d].cluster", j)), n, MaxClusterNameLength)
						}
					case "nominal":
						return badAmount(field(fmt.Sprintf("perCluster[%d].nominal", j)), val)
					}
					return nil
				})
			})
		}
		return nil
	})
}

// Bounds of an amount that can be parsed and compared quickly. The CRD's
// pattern lets any quantity through, 1e-999999999 included, and the API
// server does not parse it; parsing that one rounds it to nano units
// through a number of a billion digits, and comparing 9e999999999 with
// another quantity builds one too.
const (
	maxAmountLen = 64
	maxExponent  = 30
)

// saneAmount reports whether a raw JSON amount, a string or a number, is
// short and has a small decimal exponent ("1E" alone is the suffix exa),
// as the typed decoding reads it (escapes decoded).
func saneAmount(v []byte) bool {
	if len(v) > 0 && v[0] == '"' && bytes.IndexByte(v, '\\') >= 0 {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return true // not a string: the typed decoding refuses it
		}
		v = []byte(s)
	}
	t := strings.Trim(string(v), `"`)
	if len(t) > maxAmountLen {
		return false
	}
	i := strings.IndexAny(t, "eE")
	if i < 0 || i == len(t)-1 {
		return true
	}
	exp, err := strconv.Atoi(t[i+1:])
	if err != nil {
		return true // not a number: ParseQuantity refuses it
	}
	return exp >= -maxExponent && exp <= maxExponent
}

// badAmount refuses the amount at path (raw JSON from its start) unless it
// is sane.
func badAmount(path string, v []byte) error {
	if saneAmount(v[:skipValue(v, 0)]) {
		return nil
	}
	return limitErr("%s is too long or its exponent too large to be an amount (at most %d characters, exponent within ±%d): write one such as 8, 500m or 1k",
		path, maxAmountLen, maxExponent)
}

func tooLong(path string, n, max int) error {
	return limitErr("%s is %d characters long, more than the %d the CRD allows (maxLength): shorten it", path, n, max)
}

// longer is the number of characters of the JSON string v starts with, as
// the typed decoding reads it, when there are more than max; 0 when there
// are not, or v starts with anything else, which is the typed decoding's to
// refuse. A character takes at least one byte of the raw string, so only a
// long one is counted.
func longer(v []byte, max int) int {
	if len(v) == 0 || v[0] != '"' {
		return 0
	}
	raw := v[:skipString(v, 0)]
	if len(raw) < 2 || len(raw)-2 <= max {
		return 0
	}
	if n := runes(raw); n > max {
		return n
	}
	return 0
}

// runes counts the characters of a raw JSON string (quotes included).
func runes(raw []byte) int {
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 {
		return utf8.RuneCount(body) // an invalid byte decodes to one U+FFFD
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 0
	}
	return utf8.RuneCountInString(s)
}

// RawSpec is the value of an object's last "spec" member (raw JSON), the
// one the typed decoding keeps; nil when there is none.
func RawSpec(raw []byte) []byte {
	var spec []byte
	_ = eachMember(raw, func(key, val []byte) error {
		if string(key) == "spec" {
			spec = val[:skipValue(val, 0)]
		}
		return nil
	})
	return spec
}

// eachMember calls f with the key (escapes decoded) of each member of the
// JSON object that v starts with, and the rest of v from the member's
// value on, in turn, until f returns an error, which it returns. v is
// valid JSON; a v that does not start with an object has no members. The
// key is only valid during the call. The value's end is found after f
// returns: a check that stops early never walks the rest of it.
func eachMember(v []byte, f func(key, val []byte) error) error {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return nil
	}
	for i = skipSpace(v, i+1); i < len(v) && v[i] == '"'; i = skipSpace(v, i+1) {
		end := skipString(v, i)
		key := v[i+1 : max(end-1, i+1)]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if json.Unmarshal(v[i:end], &s) != nil {
				return nil
			}
			key = []byte(s)
		}
		if i = skipSpace(v, end); i >= len(v) || v[i] != ':' {
			return nil
		}
		start := skipSpace(v, i+1)
		if err := f(key, v[start:]); err != nil {
			return err
		}
		if end = skipValue(v, start); end <= start {
			return nil
		}
		if i = skipSpace(v, end); i >= len(v) || v[i] != ',' {
			return nil
		}
	}
	return nil
}

// eachElement calls f with the rest of v from each element of the JSON
// array that v starts with in turn, until f returns an error, which it
// returns. v is valid JSON; a v that does not start with an array has no
// elements.
func eachElement(v []byte, f func(elem []byte) error) error {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '[' {
		return nil
	}
	for i = skipSpace(v, i+1); i < len(v) && v[i] != ']'; i = skipSpace(v, i+1) {
		if err := f(v[i:]); err != nil {
			return err
		}
		end := skipValue(v, i)
		if end <= i {
			return nil
		}
		if i = skipSpace(v, end); i >= len(v) || v[i] != ',' {
			return nil
		}
	}
	return nil
}

// errEnough stops a count.
var errEnough = errors.New("enough")

// countElements counts the elements of the JSON array v, up to limit.
func countElements(v []byte, limit int) int {
	n := 0
	_ = eachElement(v, func([]byte) error {
		if n++; n >= limit {
			return errEnough
		}
		return nil
	})
	return n
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the JSON string that starts at v[i] (a
// quote): the index after its closing quote, len(v) when there is none.
func skipString(v []byte, i int) int {
	for i++; i < len(v); i++ {
		j := bytes.IndexByte(v[i:], '"')
		if j < 0 {
			return len(v)
		}
		i += j
		// The quote closes the string unless an odd number of
		// backslashes precede it.
		k := i
		for k > 0 && v[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
	}
	return len(v)
}

// skipValue returns the end of the JSON value that starts at v[i]: the
// index after it, i when there is none.
func skipValue(v []byte, i int) int {
	if i >= len(v) {
		return i
	}
	switch v[i] {
	case '"':
		return skipString(v, i)
	case '{', '[':
		depth := 0
		for i < len(v) {
			switch v[i] {
			case '"':
				i = skipString(v, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(v)
	case ',', ':', '}', ']':
		return i
	default: // a number, true, false or null
		j := i
		for j < len(v) && !strings.ContainsRune(",}] \t\n\r", rune(v[j])) {
			j++
		}
		return j
	}
}
