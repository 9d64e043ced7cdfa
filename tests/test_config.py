"""Run configs: presets, overrides, JSON round trips, one name per setting."""

import dataclasses
import json
import shlex

import pytest

from mintransformer import cli
from mintransformer.config import (
    CONFIG_CLASSES,
    PRESETS,
    ClassificationConfig,
    LanguageModelConfig,
    TranslationConfig,
    config_from_json,
    flag_fields,
    flag_overrides,
    make_config,
)


def test_configs_are_told_apart_by_their_task():
    lm = LanguageModelConfig(text="t.txt", epochs=3)
    assert config_from_json(lm.to_json()) == lm
    translation_config = TranslationConfig(epochs=4)
    assert config_from_json(translation_config.to_json()) == translation_config
    legacy = translation_config.to_json().replace('"task": "translation",', "")  # older runs
    assert '"task"' not in legacy and config_from_json(legacy) == translation_config
    with pytest.raises(ValueError, match="unknown task"):
        config_from_json('{"task": "poetry"}')


def test_each_task_defaults_are_its_base_preset():
    for task, presets in PRESETS.items():
        assert presets["base"] == {}
        assert make_config(task) == CONFIG_CLASSES[task]()


def test_presets_override_only_known_settings_and_overrides_win():
    for task, presets in PRESETS.items():
        names = {f.name for f in dataclasses.fields(CONFIG_CLASSES[task])}
        for preset in presets.values():
            assert set(preset) <= names
    config = make_config("translation", "numbers", epochs=2)
    assert config.epochs == 2 and config.d_model == PRESETS["translation"]["numbers"]["d_model"]
    with pytest.raises(ValueError, match="no setting 'layers'"):
        make_config("translation", layers=2)
    with pytest.raises(ValueError, match="preset"):
        make_config("classification", "numbers")


def test_every_flag_is_named_after_its_setting():
    parser = cli.build_parser()
    args = parser.parse_args(
        [
            "train",
            "translation",
            "--run",
            "r",
            "--num-layers",
            "2",
            "--lr",
            "0.5",
            "--norm-first",
            "--no-tie-embeddings",
        ]
    )
    overrides = flag_overrides(args, TranslationConfig)
    assert overrides == dict(
        num_layers=2, peak_learning_rate=0.5, norm_first=True, tie_embeddings=False
    )
    for task, config_class in CONFIG_CLASSES.items():
        command = {"language_model": "lm"}.get(task, task)
        help_text = parser._subparsers._group_actions[0].choices["train"]
        flags = help_text._subparsers._group_actions[0].choices[command].format_help()
        for field in flag_fields(config_class):
            assert f"--{field.name.replace('_', '-')}" in flags


def test_a_bad_setting_in_a_config_is_refused():
    with pytest.raises(ValueError, match="truncation"):
        ClassificationConfig(truncation="middle")
    with pytest.raises(ValueError, match="unknown settings: colour"):
        LanguageModelConfig.from_json('{"task": "language_model", "colour": 1}')


def test_recipe_and_budget_flags_reach_the_config():
    parser = cli.build_parser()
    args = parser.parse_args(
        shlex.split(
            "train translation --run r --attention-dropout-rate 0 --share-embeddings "
            "--embedding-init normal --minutes 60 --no-bf16"
        )
    )
    overrides = flag_overrides(args, TranslationConfig)
    assert overrides == dict(
        attention_dropout_rate=0.0, share_embeddings=True, embedding_init="normal", minutes=60.0
    )
    assert args.bf16 is False
    assert parser.parse_args(["train", "translation", "--run", "r"]).bf16 is None
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "translation", "--run", "r", "--embedding-init", "xavier"])
    for config_class in CONFIG_CLASSES.values():
        with pytest.raises(ValueError, match="minutes"):
            config_class(minutes=-1)


def test_a_config_saved_before_a_setting_existed_keeps_the_behaviour_it_was_trained_with():
    saved = TranslationConfig(norm_first=True).to_json()
    older = json.loads(saved)
    for name in ("attention_dropout_rate", "share_embeddings", "embedding_init"):
        del older[name]
    loaded = TranslationConfig.from_json(json.dumps(older))
    assert (loaded.share_embeddings, loaded.embedding_init) == (False, "uniform")
    assert loaded.attention_dropout_rate is None and loaded.norm_first is True
