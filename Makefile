# Convenience targets; the README's two commands are scripts/demo.sh and scripts/test.sh.
.PHONY: demo test bench fuzz
demo:
	./scripts/demo.sh
test:
	./scripts/test.sh
bench:
	./scripts/deps.sh
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build -j --target bench bench_expandable bench_traces_run bench_instructions bench_stacks
fuzz:
	./scripts/fuzz.sh $${HBM_FUZZ_SECONDS:-600}
