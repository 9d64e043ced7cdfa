"""Run configs: presets, overrides, JSON round trips, one name per setting."""

import dataclasses
import json
import shlex

import pytest

from mintransformer import cli
from mintransformer.config import (
    CONFIG_CLASSES,
    PRESETS,
    SETTING_CHECKS,
    ClassificationConfig,
    LanguageModelConfig,
    TranslationConfig,
    config_from_json,
    flag_fields,
    flag_overrides,
    in_flag_terms,
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
    del older["layer_norm_epsilon"]
    loaded = TranslationConfig.from_json(json.dumps(older))
    assert (loaded.share_embeddings, loaded.embedding_init) == (False, "uniform")
    assert loaded.attention_dropout_rate is None and loaded.norm_first is True
    assert loaded.layer_norm_epsilon == 1e-6  # what every model had before the setting


def test_new_runs_use_pytorch_s_layer_norm_epsilon_and_saved_ones_keep_theirs():
    assert TranslationConfig().layer_norm_epsilon == 1e-5
    saved = TranslationConfig(layer_norm_epsilon=1e-6).to_json()
    assert TranslationConfig.from_json(saved).layer_norm_epsilon == 1e-6


def test_every_setting_of_every_config_is_checked():
    for config_class in CONFIG_CLASSES.values():
        for setting in dataclasses.fields(config_class):
            assert setting.name in SETTING_CHECKS or setting.metadata.get("choices"), setting.name


@pytest.mark.parametrize(
    "settings, named",
    [
        (dict(num_layers=0), "`num_layers` must be a positive integer"),
        (dict(d_model=-1), "`d_model`"),
        (dict(num_heads=3), "divisible by `num_heads`"),
        (dict(dff=2.5), "`dff`"),
        (dict(dropout_rate=1.0), "`dropout_rate` must be a number in [0, 1)"),
        (dict(attention_dropout_rate=-0.1), "`attention_dropout_rate`"),
        (dict(label_smoothing=float("nan")), "`label_smoothing`"),
        (dict(tie_embeddings="no"), "`tie_embeddings` must be true or false, got 'no'"),
        (dict(norm_first=1), "`norm_first`"),
        (dict(mixed_precision="yes"), "`mixed_precision`"),
        (dict(data=None), "`data` must be a dict, got None"),
        (dict(vocab_size=4), "`vocab_size` must be at least 5"),
        (dict(epochs="5"), "`epochs` must be a positive integer, got '5'"),
        (dict(epochs=True), "`epochs`"),
        (dict(max_tokens=0), "`max_tokens`"),
        (dict(warmup_steps=0), "`warmup_steps`"),
        (dict(peak_learning_rate=float("inf")), "`peak_learning_rate` must be a positive finite"),
        (dict(peak_learning_rate=0), "`peak_learning_rate`"),
        (dict(average_last=0), "`average_last`"),
        (dict(seed=-1), "`seed`"),
        (dict(max_length=0), "`max_length`"),
        (dict(layer_norm_epsilon=0.0), "`layer_norm_epsilon`"),
        (dict(embedding_init="xavier"), "`embedding_init` must be one of"),
    ],
)
def test_a_bad_translation_setting_is_refused_by_name(settings, named):
    with pytest.raises(ValueError) as raised:
        TranslationConfig(**settings)
    assert named in str(raised.value)


def test_bad_settings_of_the_other_tasks_are_refused_by_name():
    for settings, named in [
        (dict(key_dim=0), "`key_dim`"),
        (dict(hidden_units=-1), "`hidden_units`"),
        (dict(ngram_dropout=1), "`ngram_dropout`"),
        (dict(labels="neg,pos"), "`labels` must be a list"),
        (dict(lowercase="no"), "`lowercase`"),
        (dict(max_batch_size=0), "`max_batch_size`"),
    ]:
        with pytest.raises(ValueError, match=named):
            ClassificationConfig(**settings)
    assert ClassificationConfig(num_heads=3, key_dim=16).num_heads == 3  # no need to divide
    for settings, named in [(dict(val_fraction=1), "`val_fraction`"), (dict(text=None), "`text`")]:
        with pytest.raises(ValueError, match=named):
            LanguageModelConfig(**settings)


def test_a_bad_setting_in_a_saved_config_names_the_file():
    for setting, value in [("epochs", "5"), ("data", None), ("tie_embeddings", "no")]:
        saved = json.loads(TranslationConfig().to_json())
        saved[setting] = value
        with pytest.raises(ValueError, match=f"^runs/x/config.json: `{setting}`"):
            config_from_json(json.dumps(saved), "runs/x/config.json")
    for task in (["x"], None, 3):
        with pytest.raises(ValueError, match="unknown task"):
            config_from_json(json.dumps({"task": task}))


def test_errors_name_a_setting_by_its_flags():
    message = "`d_model` (256) must be divisible by `num_heads` (3); `attention_dropout_rate`"
    translation_flags = [setting.name for setting in flag_fields(TranslationConfig)]
    assert in_flag_terms(message, translation_flags) == (
        "`--d-model` (256) must be divisible by `--num-heads` (`--heads`) (3); "
        "`--attention-dropout-rate`"
    )
    lm_flags = [setting.name for setting in flag_fields(LanguageModelConfig)]
    assert in_flag_terms("`text` is not a flag", lm_flags) == "`text` is not a flag"
