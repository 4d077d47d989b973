package architecture

import (
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "ome.io/quota-manager/"

// pure are the packages that decide: what they compute is a function of
// the events they are given.
var pure = []string{module + "state", module + "events", module + "projector", module + "kueuesim", module + "impact"}

// shell are the packages that only the shell may reach.
var shell = []string{
	"k8s.io/client-go/",
	"sigs.k8s.io/controller-runtime",
	"sigs.k8s.io/kueue/client-go",
	module + "events/sources",
	module + "manager",
	module + "projector/apply",
	module + "store",
	module + "webhook",
}

// data are API types and apply configurations: the projector builds
// Kueue's objects with them. They are data without a client, and what
// they import in turn (client-go's discovery for managed fields, a
// controller-runtime scheme builder) is theirs: the check does not look
// through them.
var data = []string{"k8s.io/client-go/applyconfigurations/", "sigs.k8s.io/kueue/apis/", "sigs.k8s.io/kueue/client-go/applyconfiguration/"}

// impure are the standard packages a pure package may not import: the
// network, other processes, randomness.
var impure = []string{"net", "net/http", "os/exec", "math/rand", "math/rand/v2", "crypto/rand"}

// clock are the functions of package time that read or wait on the clock.
var clock = []string{"Now", "Since", "Until", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker", "Sleep"}

func TestPureCoreImportsNoShell(t *testing.T) {
	pkgs := load(t, packages.NeedName|packages.NeedImports|packages.NeedDeps, pure...)
	for _, p := range pkgs {
		for imp := range p.Imports {
			if slices.Contains(impure, imp) {
				t.Errorf("%s imports %s: the pure core has no network, no processes and no randomness", p.PkgPath, imp)
			}
		}
		packages.Visit([]*packages.Package{p}, func(dep *packages.Package) bool {
			if isData(dep.PkgPath) {
				return false
			}
			if isShell(dep.PkgPath) {
				t.Errorf("%s reaches %s, which belongs to the shell", p.PkgPath, dep.PkgPath)
				return false
			}
			return true
		}, nil)
	}
	if len(pkgs) != len(pure) {
		t.Fatalf("loaded %d packages, want %d", len(pkgs), len(pure))
	}
}

func isData(path string) bool {
	return slices.ContainsFunc(data, func(d string) bool { return strings.HasPrefix(path, d) })
}

func isShell(path string) bool {
	for _, s := range shell {
		if path == strings.TrimSuffix(s, "/") || strings.HasPrefix(path, strings.TrimSuffix(s, "/")+"/") {
			return true
		}
	}
	return false
}

// TestPureCoreReadsNoClock: time reaches the core in events only.
func TestPureCoreReadsNoClock(t *testing.T) {
	pkgs := load(t, packages.NeedName|packages.NeedTypes|packages.NeedTypesInfo|packages.NeedSyntax, pure...)
	calls := 0
	for _, p := range pkgs {
		for id, obj := range p.TypesInfo.Uses {
			fn, ok := obj.(*types.Func)
			if !ok || fn.Pkg() == nil {
				continue
			}
			calls++
			if fn.Pkg().Path() == "time" && slices.Contains(clock, fn.Name()) {
				t.Errorf("%s: %s uses time.%s: the core reads time from events only", p.Fset.Position(id.Pos()), p.PkgPath, fn.Name())
			}
		}
	}
	if calls == 0 {
		t.Fatal("no function use was found: the check read nothing")
	}
}

// TestAdaptersUseOnlyTheCache: the informer adapters use client-go's
// tools/cache, and nothing else of it.
func TestAdaptersUseOnlyTheCache(t *testing.T) {
	for _, p := range load(t, packages.NeedName|packages.NeedImports, module+"events/sources") {
		for imp := range p.Imports {
			if strings.HasPrefix(imp, "k8s.io/client-go/") && imp != "k8s.io/client-go/tools/cache" {
				t.Errorf("%s imports %s: the adapters use client-go's tools/cache only", p.PkgPath, imp)
			}
			if slices.Contains(impure, imp) {
				t.Errorf("%s imports %s", p.PkgPath, imp)
			}
		}
	}
}

// TestCheckSeesAViolation: the checks above find what they look for, on
// the shell itself.
func TestCheckSeesAViolation(t *testing.T) {
	if !isShell("k8s.io/client-go/kubernetes") || !isData("k8s.io/client-go/applyconfigurations/meta/v1") || isData("k8s.io/client-go/kubernetes") ||
		!isShell(module+"manager") || isShell(module+"managerx") {
		t.Fatal("the shell and data prefixes classify wrongly")
	}
	pkgs := load(t, packages.NeedName|packages.NeedTypes|packages.NeedTypesInfo, module+"manager")
	found := false
	for _, obj := range pkgs[0].TypesInfo.Uses {
		if fn, ok := obj.(*types.Func); ok && fn.Pkg() != nil && fn.Pkg().Path() == "time" && slices.Contains(clock, fn.Name()) {
			found = true
		}
	}
	if !found {
		t.Error("the manager reads the clock, and the check does not see it")
	}
}

// TestPlaneBehindItsSeam: the management plane's shell is package
// manager/plane, which implements manager.Mode. Imports point down: the
// manager never reaches the plane. And no file of the manager outside
// options.go (where --mode is parsed, checked and turned into the state's
// configuration) reads the management mode: the plane's work is the
// plane's package's, and the shell calls it only through the seam.
func TestPlaneBehindItsSeam(t *testing.T) {
	const plane = module + "manager/plane"
	pkgs := load(t, packages.NeedName|packages.NeedImports|packages.NeedDeps|packages.NeedTypes|packages.NeedTypesInfo|packages.NeedSyntax,
		module+"manager", plane)
	var shell, planePkg *packages.Package
	for _, p := range pkgs {
		switch p.PkgPath {
		case module + "manager":
			shell = p
		case plane:
			planePkg = p
		}
	}
	if shell == nil || planePkg == nil {
		t.Fatalf("loaded %d packages, want manager and manager/plane", len(pkgs))
	}
	if _, ok := planePkg.Imports[module+"manager"]; !ok {
		t.Errorf("%s does not import the manager: the check below looks at nothing the plane plugs into", plane)
	}
	packages.Visit([]*packages.Package{shell}, func(dep *packages.Package) bool {
		if dep.PkgPath == plane {
			t.Errorf("the manager reaches %s: the plane imports the manager, never the other way", plane)
		}
		return true
	}, nil)
	modes := map[string]bool{module + "manager.ModeManagement": true, module + "events.ModeManagement": true}
	seen := 0
	for id, obj := range shell.TypesInfo.Uses {
		c, ok := obj.(*types.Const)
		if !ok || c.Pkg() == nil || !modes[c.Pkg().Path()+"."+c.Name()] {
			continue
		}
		pos := shell.Fset.Position(id.Pos())
		if strings.HasSuffix(pos.Filename, "_test.go") {
			continue
		}
		seen++
		if filepath.Base(pos.Filename) != "options.go" {
			t.Errorf("%s: the manager reads the management mode (%s) outside options.go: put the plane's work behind manager.Mode, in %s", pos, c.Name(), plane)
		}
	}
	if seen == 0 {
		t.Error("no use of the management mode was found in the manager, not even options.go's: the check read nothing")
	}
}

func load(t *testing.T, mode packages.LoadMode, paths ...string) []*packages.Package {
	t.Helper()
	pkgs, err := packages.Load(&packages.Config{Mode: mode, Dir: ".."}, paths...)
	if err != nil {
		t.Fatalf("loading %v: %v", paths, err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatalf("loading %v failed", paths)
	}
	return pkgs
}
