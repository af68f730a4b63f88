"""The tutorial's Python route, end to end (docs/your-model.md): the list model of
examples/list_contains.py is loaded, trained, evaluated, asked for predictions, generated as
hardware and priced by the cycle report, all through ``amp_hls``'s public API.

    python examples/walkthrough.py [OUT_DIR]     (default build/walkthrough)
"""

import sys
from pathlib import Path

import amp_hls as amp

HERE = Path(__file__).parent


def main(out: Path) -> None:
    spec = amp.load_model(HERE / "list_contains.py")
    config = amp.training_config(spec, epochs=5, seed=0)
    trainer = amp.train(spec, config, log=out / "epochs.csv", summary=out / "run.json", checkpoint=out / "run.npz")
    test = spec.splits(config.seed).test
    result = amp.evaluate(trainer, test)
    print(f"test: loss {result.loss:.4f}, accuracy {result.metric:.4f} on {result.count} lists")

    unlabelled = [amp.Example({"tokens": [3, 1]}, amp.NO_LABEL),
                  amp.Example({"tokens": [0, 1, 2, 2]}, amp.NO_LABEL)]
    for example, prediction in zip(unlabelled, amp.predict(trainer, unlabelled)):
        print(f"{example.data['tokens']} contains a 3: {bool(prediction.classes['xent'][0])}")

    project = amp.generate(spec, out / "project", board="pynq-z2")
    cycles, _ = amp.report(project.root, model=spec, instances=8, measure=False)
    print(amp.format_report(cycles))
    amp.testbench(project.root, model=spec, instances=4, mak=[2])
    print(f"wrote {project.root}; the cocotb testbench: pytest {project.root / 'tb'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("build/walkthrough"))
