"""The hard-attention training objective of `sat-hard` (models/sat.py, Xu et al. 2015 Sec. 4.1):
cross-entropy under the sampled cells, minus lambda_e x the attention entropy, minus lambda_r x
(reward - baseline) x log p(sampled cells) with a moving-average baseline; rows that use the
expectation contribute no REINFORCE term."""
import math

import torch
import torch.nn.functional as F

from viewer.engine.models.base import Step
from viewer.engine.models.sat import ShowAttendTell

V, K = 5, 3


def _model(**kw) -> ShowAttendTell:
    torch.manual_seed(0)
    return ShowAttendTell(V, 4, attention="hard", embed_dim=6, hidden_dim=8, att_dim=5, proj_dim=6, dropout=0.0, **kw)


def _constructed(model, logits, alphas, sampled_cells):
    """Replace the decoder by fixed outputs: logits (T-1, N, V), attention (T-1, N, K), and per row
    the cell drawn at each step (None: the row used the expectation)."""
    steps = []
    for t in range(logits.shape[0]):
        logp = torch.stack([alphas[t, n, cells[t]].log() if cells is not None else alphas[t, n].sum() * 0
                            for n, cells in enumerate(sampled_cells)])
        steps.append(Step(logits[t], alphas[t], sample_logprob=logp))
    model.teacher_forced = lambda *a: (logits, steps)


def _case():
    tokens = torch.tensor([[1, 3, 4, 2], [1, 4, 2, 0]])          # row 1 is padded after <end>
    logits = torch.tensor([[[0.1, 0.2, 0.3, 2.0, 0.5], [0.3, 0.1, 0.0, 0.2, 1.5]],
                           [[0.0, 0.1, 0.2, 0.3, 1.0], [0.5, 0.0, 2.0, 0.1, 0.2]],
                           [[0.2, 0.0, 1.0, 0.3, 0.1], [0.9, 0.9, 0.9, 0.9, 0.9]]], requires_grad=True)
    raw = torch.tensor([[[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]],
                        [[0.1, 0.8, 0.1], [0.4, 0.4, 0.2]],
                        [[0.3, 0.3, 0.4], [1 / 3, 1 / 3, 1 / 3]]], requires_grad=True)
    return tokens, logits, raw


def _by_hand(tokens, logits, alphas, cells, lambda_e, lambda_r, baseline):
    """The objective written out word by word (row 0 samples cells, row 1 uses the expectation)."""
    emitted = tokens[:, 1:]
    words = [(n, t) for n in range(2) for t in range(3) if emitted[n, t] != 0]
    logp = {(n, t): float(F.log_softmax(logits[t, n], -1)[emitted[n, t]]) for n, t in words}
    xe = -sum(logp.values()) / len(words)
    ent = -sum(float((alphas[t, n] * alphas[t, n].log()).sum()) for n, t in words) / len(words)
    reward = sum(logp[0, t] for t in range(3)) / 3                      # row 0's mean token log-likelihood
    b = reward if baseline == 0 else baseline
    logp_cells = sum(math.log(float(alphas[t, 0, cells[t]])) for t in range(3))
    loss = xe - lambda_e * ent - lambda_r * (reward - b) * logp_cells / len(words)
    return loss, xe, ent, reward, 0.9 * b + 0.1 * reward


def test_hard_attention_loss_on_a_constructed_case_matches_the_objective_by_hand():
    tokens, logits, alphas = _case()
    cells = [0, 1, 2]
    for baseline in (0.0, -0.2):           # 0: the first sampled batch starts the average at the reward
        model = _model(lambda_e=0.1, lambda_r=2.0)
        model.baseline.fill_(baseline)
        _constructed(model, logits, alphas, [cells, None])
        loss, logs = model.loss(None, None, tokens, None)
        want, xe, ent, reward, new_baseline = _by_hand(tokens, logits.detach(), alphas.detach(), cells, 0.1, 2.0, baseline)
        assert math.isclose(float(loss), want, rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(logs["xe"], xe, rel_tol=1e-5) and math.isclose(logs["entropy"], ent, rel_tol=1e-5)
        assert math.isclose(float(model.baseline), new_baseline, rel_tol=1e-5) and logs["baseline"] == float(model.baseline)
        if baseline == 0.0:
            assert math.isclose(float(model.baseline), reward, rel_tol=1e-5)   # starts at the reward: no REINFORCE push
            assert math.isclose(float(loss), xe - 0.1 * ent, rel_tol=1e-5)


def test_reward_is_detached_and_the_reinforce_gradient_on_the_sampled_cells_is_scaled_by_reward_minus_baseline():
    tokens, logits, alphas = _case()
    cells = [0, 1, 2]
    model = _model(lambda_e=0.0, lambda_r=1.0)
    model.baseline.fill_(-0.2)
    _constructed(model, logits, alphas, [cells, None])
    loss, _ = model.loss(None, None, tokens, None)
    loss.backward()
    # the words' scores get only the cross-entropy gradient: the reward does not back-propagate
    emitted, valid = tokens[:, 1:].T, (tokens[:, 1:].T != 0).float()
    xe_only = logits.detach().clone().requires_grad_(True)
    (F.cross_entropy(xe_only.flatten(0, 1), emitted.flatten(), reduction="none").view_as(valid) * valid).sum().div(5).backward()   # 5 words
    assert torch.allclose(logits.grad, xe_only.grad, atol=1e-6)
    # d loss / d alpha of a drawn cell = -lambda_r (reward - b) / (n_tokens alpha); the expectation row gets none
    reward = float(sum(F.log_softmax(logits[t, 0], -1)[tokens[0, t + 1]] for t in range(3)) / 3)
    for t, c in enumerate(cells):
        expected = -(reward - (-0.2)) / 5 / float(alphas[t, 0, c])
        assert math.isclose(float(alphas.grad[t, 0, c]), expected, rel_tol=1e-5)
    assert float(alphas.grad[:, 1].abs().sum()) == 0.0
    assert float(alphas.grad[0, 0, 1]) == 0.0 and float(alphas.grad[0, 0, 2]) == 0.0   # cells not drawn


def test_entropy_term_rewards_spread_attention():
    tokens, logits, alphas = _case()
    model = _model(lambda_e=1.0, lambda_r=0.0)
    _constructed(model, logits, alphas, [None, None])
    loss, logs = model.loss(None, None, tokens, None)
    assert "baseline" not in logs and float(model.baseline) == 0.0      # no row sampled: no REINFORCE, no update
    loss.backward()
    # gradient descent raises the entropy: it moves weight from the largest to the smallest cell
    assert float(alphas.grad[0, 0, 0]) > float(alphas.grad[0, 0, 2])
    assert math.isclose(float(loss), logs["xe"] - logs["entropy"], rel_tol=1e-5)


def _real_loss(lambda_r: float, baseline: float):
    model = _model(lambda_e=0.0, lambda_r=lambda_r)
    model.train()
    init = model.init_state
    model.init_state = lambda *a, **kw: {**init(*a, **kw), "expect": torch.zeros(2, dtype=torch.bool)}   # all sample
    model.baseline.fill_(baseline)
    torch.manual_seed(1)
    feats, mask = torch.randn(2, K * 3, 4), torch.ones(2, K * 3, dtype=torch.bool)
    tokens = torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2], [1, 3, 2, 0]])
    loss, logs = model.loss(feats, mask, tokens, torch.tensor([0, 1, 1]))
    loss.backward()
    return model, logs


def test_on_the_real_decoder_the_attention_parameters_learn_only_through_reinforce():
    """With hard samples the context does not depend on alpha, so without the entropy term the
    attention scorer gets a gradient only from the REINFORCE term."""
    model, logs = _real_loss(lambda_r=1.0, baseline=5.0)    # far above the (negative) reward
    assert "baseline" in logs and logs["baseline"] < 5.0
    for p in (model.att_score.weight, model.att_hidden.weight, model.att_feat.weight):
        assert p.grad is not None and float(p.grad.abs().sum()) > 1e-6
    model, _ = _real_loss(lambda_r=0.0, baseline=5.0)
    assert float(model.att_score.weight.grad.abs().sum()) == 0.0
