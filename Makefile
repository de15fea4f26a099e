# `make run` and `make test` work on a fresh machine: each creates .venv and installs requirements.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test setup browser java install-check qa speed naming guide-choice novel rescore world-data world world-eval

$(VENV)/installed.stamp: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

setup: $(VENV)/installed.stamp

# The browser tests drive Debian's chromium with Playwright (never `playwright install`).
browser:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# METEOR and the PTB tokenizer run on Java; without it evaluation skips METEOR (viewer/evaluate.py).
java:
	@command -v java >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq default-jre-headless >/dev/null; }

run: setup
	$(PY) launch.py $(ARGS)

# `pip install .` into a fresh venv with no pins (the newest releases pyproject allows), then the
# installed command captions a photo outside the repo: .ci/fresh-install (~2-4 min, torch is big).
install-check:
	PYTHON=$(PYTHON) .ci/fresh-install

# Two workers (pytest-xdist), each running a whole test file at a time (its module's app server and fixtures
# stay one): about 20 minutes of pytest on 2 cores, 28 in one process. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: setup browser java install-check
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests

# Ask the photo: questions generated from Flickr8k's captions, the four question answering models
# trained on them (resumable: run again to continue) and scored on dev-report into reports/qa/,
# then the README's table. DATA: the Flickr8k folder. About an hour on 2 CPU cores.
DATA ?= ../shared/data/flickr8k
QA_MODELS := vqa-blind vqa-regions vqa-bow vqa-grid   # the blind model first: the others are scored beside it
qa: setup
	$(PY) -m viewer qa-data --data $(DATA) --out runs/questions.json
	for m in $(QA_MODELS); do \
	  $(PY) -m viewer train --model $$m --data $(DATA) --questions runs/questions.json --out runs/qa-$$m \
	    --epochs 15 --patience 3 --resume && \
	  $(PY) -m viewer evaluate --model runs/qa-$$m/best.safetensors --data $(DATA) --questions runs/questions.json \
	    --split dev-report --out reports/qa/$$m --dependence --blind runs/qa-vqa-blind/best.safetensors \
	    $$( [ $$m = vqa-regions ] && echo --explain occlusion,gradcam --explain-photos 30 --explain-sanity 2 ) || exit 1; \
	done
	$(PY) -m viewer.analysis.tables

# The README's speed tables, measured on this machine (run it idle: other jobs slow every figure):
# in-process (`bench`), in headless chromium (`loadtest --browser`), 20 sessions at once (`loadtest`)
# and the photos per second of a dataset command, local and on Ray (DATA: the Flickr8k folder), into
# reports/speed/, then the tables. About 25 minutes on 2 cores.
speed: setup browser
	mkdir -p reports/speed
	$(PY) -m viewer bench --ask --explain --startup --json > reports/speed/inprocess.json.part
	mv reports/speed/inprocess.json.part reports/speed/inprocess.json
	$(PY) -m viewer.measure.loadtest --browser --photos 6 --ask --pair --out reports/speed/browser.json > /dev/null
	$(PY) -m viewer.measure.loadtest --clients 20 --out reports/speed/load.json > /dev/null
	$(PY) -m viewer bench --engines --models sat-soft --photos 24 --data $(DATA) > reports/speed/engines.json.part
	mv reports/speed/engines.json.part reports/speed/engines.json
	$(PY) -m viewer.analysis.tables

# Naming what is there: every captioning model on dev-report, beam 3, plain, ruling out what the
# detector does not see, and guided (ruling out, its top classes required, no trigram twice; chosen on
# dev-select: make guide-choice), into reports/eval/ and reports/guide/, then the README's table.
# About 30 minutes on 2 cores.
CAPTION_MODELS = $$($(PY) -c 'from viewer.engine.checkpoints import shipped; print(*shipped())')   # the shipped captioners
guide-choice: setup   # which classes guidance rules out, chosen on dev-select (a few minutes): reports/guide/choice.json
	$(PY) -m viewer.analysis.guide_choice --data $(DATA)

naming: setup
	for m in $(CAPTION_MODELS); do \
	  $(PY) -m viewer evaluate --model $$m --data $(DATA) --split dev-report --out reports/eval/$$m && \
	  $(PY) -m viewer evaluate --model $$m --data $(DATA) --split dev-report --guide detector --guide-most 0 \
	    --out reports/guide/$$m-dev-report-rule-out && \
	  $(PY) -m viewer evaluate --model $$m --data $(DATA) --split dev-report --guide detector \
	    --out reports/guide/$$m-dev-report-guided || exit 1; \
	done
	$(PY) -m viewer.analysis.tables

# CHAIR and object recall of the committed caption reports, rescored from their captions.json after
# the measure changes (data/chair.py; nothing is decoded again), and the answers' guessed verdict
# from their answers (analysis/language_prior.py; the shipped models only); then the README's tables.
rescore: setup
	$(PY) -m viewer.analysis.rescore --data $(DATA) reports/eval reports/guide reports/novel reports/qa
	$(PY) -m viewer.analysis.tables

# The novel-object protocol (Hendricks et al., CVPR 2016), on Flickr8k: `updown` trained from scratch
# without the training captions that name the held-out classes (analysis/hallucination.py
# NOVEL_CLASSES; their words stay in the vocabulary), NOVEL_EPOCHS epochs; then the run forked for
# NOVEL_FORK more epochs, as `updown` or as `updown-copy` warm-started from it (the shipped copy model's
# recipe); both scored on dev-report: the F1 of mentioning each held-out class, then the README's table.
NOVEL := bicycle,skateboard,car,couch,cat,motorcycle,frisbee,bird
NOVEL_EPOCHS ?= 7
NOVEL_FORK ?= 1
novel: setup
	$(PY) -m viewer train --model updown --data $(DATA) --hold-out $(NOVEL) --out runs/novel-updown \
	  --epochs $(NOVEL_EPOCHS) --lr 5e-4 --resume
	test -f runs/novel-updown-base.safetensors || cp runs/novel-updown/last.safetensors runs/novel-updown-base.safetensors
	$(PY) -m viewer train --model updown-copy --data $(DATA) --hold-out $(NOVEL) --out runs/novel-updown-copy \
	  --init-from runs/novel-updown-base.safetensors --epochs $(NOVEL_FORK) --lr 5e-4 --resume
	$(PY) -m viewer train --model updown --data $(DATA) --hold-out $(NOVEL) --out runs/novel-updown \
	  --epochs $$(( $(NOVEL_EPOCHS) + $(NOVEL_FORK) )) --lr 5e-4 --resume
	for m in updown updown-copy; do \
	  $(PY) -m viewer evaluate --model runs/novel-$$m/last.safetensors --data $(DATA) --split dev-report \
	    --out reports/novel/$$m || exit 1; \
	done
	$(PY) -m viewer.analysis.tables

# Speak the world people photograph, its data (viewer/data/world.py): the detector's labels of the
# 5,000 COCO photos (resumable: run again to continue), a seeded choice part kept out of training, a
# vocabulary that can say every COCO class, pseudo-captions, into runs/world/ (report.json). About
# 20 minutes on 2 cores, nearly all of it the detector.
SHARED ?= ../shared/data
world-data: setup
	$(PY) -m viewer world-data --coco $(SHARED)/coco-photos --captions $(SHARED)/coco-captions \
	  --flickr30k $(SHARED)/flickr30k-captions --flickr8k $(SHARED)/flickr8k --out runs/world

# Models that have read COCO (issue "Speak the world"): `sat-soft` warm-started from the shipped one on
# Flickr8k + the COCO pseudo-pairs of runs/world (make world-data first), with its grown vocabulary, the
# word-level gate at WORLD_GATE and without it (the ablation's two rows), WORLD_EPOCHS epochs, every
# epoch kept; resumable (run again to continue). One run after the other: each holds about 8 GB of
# features and 12 GB at its dev evaluation (two at once were killed for memory on 24 GB); about
# 20 minutes an epoch on 2 cores. Then world-eval: proxy CHAIR and recall on the choice part.
WORLD_EPOCHS ?= 3
WORLD_GATE ?= 0.3
WORLD_ARGS = --data $(DATA) --world runs/world --coco $(SHARED)/coco-photos --init-from checkpoints/sat-soft.safetensors \
  --epochs $(WORLD_EPOCHS) --lr 4e-4 --keep-epochs --resume
world: setup
	$(PY) -m viewer train --model sat-soft $(WORLD_ARGS) --gate $(WORLD_GATE) --out runs/world-sat-soft-gate$(WORLD_GATE)
	$(PY) -m viewer train --model sat-soft $(WORLD_ARGS) --out runs/world-sat-soft
WORLD_EPOCH ?= 1
WORLD_RUN = runs/world-sat-soft-gate$(WORLD_GATE)/epoch-$(WORLD_EPOCH).safetensors
WORLD_MODELS ?= sat-soft,updown-copy,$(WORLD_RUN)
world-eval: setup
	$(PY) -m viewer world-eval --world runs/world --coco $(SHARED)/coco-photos --captions $(SHARED)/coco-captions \
	  --flickr30k $(SHARED)/flickr30k-captions --models $(WORLD_MODELS) --out reports/world/choice.json
	$(PY) -m viewer evaluate --model $(WORLD_RUN) --data $(DATA) --split dev-report --out reports/world/dev-report-sat-soft-gate$(WORLD_GATE)
	$(PY) -m viewer.analysis.tables
