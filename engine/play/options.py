"""The engine's USI options: the table `usi` lists, `setoption` checks, and the search settings they give."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.backends.choose import BACKENDS, default_model_path
from engine.core.moves import MAX_LEGAL_MOVES
from engine.play.book import default_book_path
from engine.search import gumbel
from engine.search.mate import MAX_DEPTH, MAX_LEAF_PLIES
from engine.search.puct import SEARCH_MODES, PuctParams

ENGINE_NAME = "GumbelShogi"
ENGINE_AUTHOR = "gumbel-shogi developers"


@dataclass(frozen=True)
class Option:
    """One USI option: `type` is spin, check, combo, string or filename."""

    name: str
    type: str
    default: Any
    min: int = 0
    max: int = 0
    choices: tuple[str, ...] = ()

    def usi_line(self) -> str:
        line = f"option name {self.name} type {self.type} default {self.format(self.default)}"
        if self.type == "spin":
            line += f" min {self.min} max {self.max}"
        for c in self.choices:
            line += f" var {c}"
        return line

    @staticmethod
    def format(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return "<empty>" if value == "" else str(value)

    def parse(self, text: str) -> Any:
        """The value of `setoption ... value <text>`; ValueError with a message if it is not valid."""
        if self.type == "spin":
            try:
                v = int(text)
            except ValueError:
                raise ValueError(f"{self.name} needs an integer, got {text!r}") from None
            if not self.min <= v <= self.max:
                raise ValueError(f"{self.name} must be in {self.min}..{self.max}, got {v}")
            return v
        if self.type == "check":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{self.name} needs true or false, got {text!r}")
            return text.lower() == "true"
        if self.type == "combo":
            if text not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}, got {text!r}")
            return text
        return "" if text == "<empty>" else text


def default_options() -> list[Option]:
    model = default_model_path()
    book = default_book_path()
    big = 2**31 - 1
    return [
        Option("USI_Ponder", "check", False),
        Option("USI_Hash", "spin", 256, 1, 1 << 20),  # GUIs send it; the tree is bounded by UCT_NodeLimit
        Option("DNN_Model", "filename", str(model) if model else ""),
        # a dlshogi checkpoint/npz does not record relu or swish; auto: from the file (name), else an error
        Option("DNN_Activation", "combo", "auto", choices=("auto", "relu", "swish")),
        Option("Backend", "combo", "auto", choices=BACKENDS),
        Option("Threads", "spin", 0, 0, 256),  # inference threads per UCT thread (0: the cores shared)
        Option("CPU_Int8", "check", True),  # onnxruntime on a CPU: the network quantized to int8
        Option("DNN_Batch_Size", "spin", 16, 1, 1024),  # per UCT thread
        Option("UCT_Threads", "spin", 2, 1, 16),  # batches in flight, each with its own evaluator
        Option("Search_Mode", "combo", "puct", choices=SEARCH_MODES),
        Option("Gumbel_Simulations", "spin", 64, 2, 100000),
        Option("Gumbel_Considered", "spin", 16, 2, 64),
        Option("Gumbel_Noise", "check", False),  # the root's Gumbel noise (self-play's exploration)
        Option("Gumbel_C_Scale", "spin", round(gumbel.C_SCALE * 100), 0, 10000),  # percent: sigma's c_scale
        Option("Gumbel_Q_Rescale", "check", gumbel.RESCALE),  # sigma of min-max rescaled Q, else absolute Q
        Option("Policy_Temperature", "spin", 0, 0, 1000),  # percent; 0 = greedy
        Option("C_init", "spin", 144, 0, 500),
        Option("C_base", "spin", 28288, 10000, 100000),
        Option("C_fpu_reduction", "spin", 27, 0, 100),
        Option("C_init_root", "spin", 116, 0, 500),
        Option("C_base_root", "spin", 25617, 10000, 100000),
        Option("C_fpu_reduction_root", "spin", 0, 0, 100),
        Option("Softmax_Temperature", "spin", 174, 1, 500),  # percent
        Option("Resign_Threshold", "spin", 0, 0, 1000),  # permille; 0 never resigns (dlshogi default)
        Option("Draw_Value_Black", "spin", 500, 0, 1000),  # permille
        Option("Draw_Value_White", "spin", 500, 0, 1000),
        Option("Draw_Ply", "spin", 0, 0, 10000),  # 0: no move limit in the search
        Option("Byoyomi_Margin", "spin", 200, 0, big),
        Option("Time_Margin", "spin", 1000, 0, big),
        Option("PV_Interval", "spin", 500, 0, big),
        Option("MultiPV", "spin", 1, 1, MAX_LEGAL_MOVES),  # root moves reported, best first (analysis)
        Option("Mate_Root_Search", "spin", 33, 0, MAX_DEPTH),  # df-pn depth at the root; 0 = off
        Option("Mate_Root_Nodes", "spin", 100000, 1000, big),
        Option("Mate_Leaf_Search", "spin", 5, 0, MAX_LEAF_PLIES),  # plies probed at each new leaf; 0 = off
        Option("Const_Playout", "spin", 0, 0, big),
        Option("UCT_NodeLimit", "spin", 2_000_000, 1000, big),
        Option("ReuseSubtree", "check", True),
        Option("USI_OwnBook", "check", True),  # use Book_File when one is set
        Option("Book_File", "filename", str(book) if book else ""),  # an OSL weighted book; empty: none
        Option("Book_Moves", "spin", 64, 0, 10000),  # the book is asked up to this move number
        Option("Book_Best_Move", "check", False),  # the heaviest book move; else drawn by the weights
    ]


def search_params(values: dict[str, Any]) -> PuctParams:
    """The search constants the options set, in real units (the options hold percent and permille)."""
    v = values
    return PuctParams(
        c_init=v["C_init"] / 100,
        c_base=float(v["C_base"]),
        c_fpu_reduction=v["C_fpu_reduction"] / 100,
        c_init_root=v["C_init_root"] / 100,
        c_base_root=float(v["C_base_root"]),
        c_fpu_reduction_root=v["C_fpu_reduction_root"] / 100,
        softmax_temperature=v["Softmax_Temperature"] / 100,
        draw_value_black=v["Draw_Value_Black"] / 1000,
        draw_value_white=v["Draw_Value_White"] / 1000,
        max_moves=v["Draw_Ply"] or None,
        node_limit=v["UCT_NodeLimit"],
        leaf_mate_plies=v["Mate_Leaf_Search"],
        mode=v["Search_Mode"],
        gumbel_considered=v["Gumbel_Considered"],
        gumbel_noise=v["Gumbel_Noise"],
        gumbel_c_scale=v["Gumbel_C_Scale"] / 100,
        gumbel_rescale=v["Gumbel_Q_Rescale"],
        multipv=v["MultiPV"],
    )
