"""Word lists of the Chinese pipeline: negators, question words, contrasting words, units.

Every list is of whole jieba tokens (or of text patterns where a token would not do, said so):
a word that merely *contains* a negator or a numeral character ("不错", "非常", "四川", "一下")
is not one. The antonym lexicon is a set of contrast groups: two different words of one group
say opposite or mutually exclusive things ("升级" / "降级", "今天" / "明天").
"""

from __future__ import annotations


def _words(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


# --- negation --------------------------------------------------------------------------------

# Tokens that negate what follows them.
NEGATORS = _words(
    "不 没 没有 未 未能 未曾 别 非 无 勿 否 甭 莫 不要 不能 不是 不会 不用 不必 不可 不可以 不想 "
    "不敢 不愿 不愿意 不让 不给 不再 不太 没能 没法 无法 无须 无需 毫无 并非 并不 并没有 从不 "
    "从未 从没 决不 绝不 尚未 还没 还没有 不得 不肯"
)
# Tokens that begin with a negator character but do not negate ("not bad" = good, "very",
# "whatever", "otherwise", "other people", "future", "however"), or whose negation is part of a
# fixed meaning the antonym lexicon handles ("不同" / "相同").
NOT_NEGATIONS = _words(
    "不错 不过 不仅 不但 不管 不论 不断 不久 不少 不同 不如 不然 不禁 不得不 不止 不只 不免 "
    "不外乎 不至于 不料 不愧 不妨 不及 不良 不便 不满 不安 不足 不一定 不停 不用谢 不客气 "
    "非常 非得 无论 无聊 无线 无限 无人机 无锡 无数 无所谓 否则 否认 别人 别的 别处 别墅 别名 "
    "别称 特别 分别 区别 识别 类别 级别 性别 未来 未知 未婚 没关系 没事 没用 莫非 是否 能否 与否 "
    "可否 差不多 了不起 对不起 要不 要不然 不行 不锈钢 不动产 不孕 不孕症 不朽 不锈 未免 不利 不幸"
)
# Leading negator characters that jieba glues to their verb ("不想", "没到", "未收到"); the rest
# of the token is the negated word. 别/非/无 are left out: they start too many plain words.
NEGATOR_PREFIXES: tuple[str, ...] = ("没有", "不", "没", "未")
# A-not-A questions ("是不是", "能不能", "有没有", "可不可以") ask yes or no; no negation. Matched
# on the text: the same character (or two) on both sides of 不 / 没.
A_NOT_A = r"([\u4e00-\u9fff])(?:[不没])\1|可不可以|([\u4e00-\u9fff]{2})不\2|有没(?!有)"

# --- questions -------------------------------------------------------------------------------

# Token → the kind of answer it asks for (what English's WH_ANSWER_KIND does). "什么" and "哪个"
# ask for a thing and never conflict; "怎么" before a negation asks why ("怎么还没到账").
ASK_KINDS: dict[str, str] = {
    **dict.fromkeys(("谁", "谁的", "哪位"), "person"),
    **dict.fromkeys(("什么时候", "何时", "几点", "哪天", "哪年", "几月", "几号", "啥时候"), "time"),
    **dict.fromkeys(("哪一年", "哪一天", "哪个月", "什么时间", "多会儿"), "time"),
    **dict.fromkeys(("哪里", "哪儿", "在哪", "在哪里", "在哪儿", "何处", "哪些地方"), "place"),
    **dict.fromkeys(("什么地方", "啥地方", "哪个地方"), "place"),
    **dict.fromkeys(("为什么", "为何", "怎么会", "为啥", "干嘛", "干吗", "何故"), "reason"),
    **dict.fromkeys(
        ("多少", "几", "多大", "多久", "多长", "多远", "多高", "多重", "几个"), "quantity"
    ),
    **dict.fromkeys(
        ("多少钱", "几岁", "几次", "几天", "几年", "多少次", "多少天", "几种"), "quantity"
    ),
    **dict.fromkeys(("怎么", "如何", "怎样", "怎么样", "咋", "怎么办", "咋办", "怎么弄"), "manner"),
    **dict.fromkeys(("什么", "哪个", "啥", "哪", "哪些", "什么样"), "thing"),
}
# The one kind that asks for anything.
THING = "thing"
# Kinds that Chinese questions trade for one another: 怎么 asks how, why and where to
# ("在哪里可以买到" / "怎样可以买到", "为什么开不了机" / "怎么开不了机"), and "什么时候到账" /
# "多久到账" ask the same. Measured on half A of LCQMC and BQ (docs/chinese.md).
COMPATIBLE_ASKS = frozenset(
    {
        frozenset({"manner", "reason"}),
        frozenset({"manner", "place"}),
        frozenset({"time", "quantity"}),
    }
)
# Words that start with a question word's characters but ask nothing ("几乎" = almost).
NOT_ASKING = ("几乎", "哪怕", "茶几", "几何", "谁知", "多少有点", "怎么也", "什么的")

# Brands and products jieba tags as plain nouns (or not at all): names for the entity guard.
BRANDS = _words(
    "苹果 华为 小米 三星 荣耀 oppo vivo 魅族 联想 索尼 佳能 尼康 戴尔 惠普 华硕 宏碁 "
    "百度 腾讯 阿里巴巴 阿里 淘宝 天猫 京东 拼多多 美团 滴滴 抖音 快手 微博 微信 支付宝 "
    "花呗 借呗 微粒贷 余额宝 网易 新浪 搜狐 知乎 头条 优酷 爱奇艺 "
    "宝马 奔驰 奥迪 丰田 本田 大众 特斯拉 比亚迪 吉利 长城 福特 日产 现代 "
    "耐克 阿迪达斯 李宁 安踏 可口可乐 百事 麦当劳 肯德基 星巴克"
)
# Latin product names and the brand that makes them: "iPhone" names 苹果 ("苹果手机" = iPhone).
ENTITY_ALIASES: dict[str, str] = {
    "iphone": "苹果",
    "ipad": "苹果",
    "macbook": "苹果",
    "mac": "苹果",
    "galaxy": "三星",
    "wechat": "微信",
    "alipay": "支付宝",
}
# One-character contrast words that lead a compound ("买房" / "卖房", "升职" / "降职").
POLAR_HEADS = frozenset("买卖涨跌升降")

# --- contrasting words -----------------------------------------------------------------------

_CONTRAST_GROUPS: tuple[str, ...] = (
    # verbs of change and direction
    "升级 降级",
    "加密 解密",
    "借入 借出",
    "上涨 下跌",
    "涨 跌",
    "涨价 降价",
    "升值 贬值",
    "增加 减少",
    "增长 下降",
    "上升 下降",
    "提高 降低",
    "提升 降低",
    "上调 下调",
    "提额 降额",
    "加速 减速",
    "加 减",
    "打开 关闭",
    "开启 关闭",
    "开通 关闭",
    "启用 禁用 停用",
    "开 关",
    "开机 关机",
    "登录 退出 登出",
    "注册 注销",
    "绑定 解绑",
    "冻结 解冻",
    "锁定 解锁",
    "安装 卸载",
    "上传 下载",
    "压缩 解压",
    "买 卖",
    "买入 卖出",
    "购买 出售",
    "存 取",
    "存款 取款",
    "存钱 取钱",
    "存入 取出",
    "转入 转出",
    "充值 提现",
    "收 付",
    "收款 付款",
    "收入 支出",
    "发送 接收",
    "进口 出口",
    "入口 出口",
    "借钱 还钱",
    "借款 还款",
    "允许 禁止",
    "同意 拒绝",
    "接受 拒绝",
    "支持 反对",
    "喜欢 讨厌",
    "爱 恨",
    "赢 输",
    "胜 负",
    "成功 失败",
    "开始 结束",
    "上班 下班",
    "上车 下车",
    # adjectives
    "大 小",
    "最大 最小",
    "高 低",
    "最高 最低",
    "贵 便宜",
    "多 少",
    "最多 最少",
    "快 慢",
    "长 短",
    "新 旧",
    "冷 热",
    "难 容易",
    "好 坏",
    "好处 坏处",
    "优点 缺点",
    "胖 瘦",
    "远 近",
    "强 弱",
    "深 浅",
    "宽 窄",
    "厚 薄",
    "重 轻",
    "硬 软",
    "真 假",
    "真的 假的",
    "对 错",
    "正确 错误",
    "合法 非法",
    "有效 无效",
    "有线 无线",
    "相同 不同",
    "富 穷",
    # people, places, times, colours: one answer each
    "男 女",
    "男人 女人",
    "男生 女生",
    "男性 女性",
    "男孩 女孩",
    "男孩子 女孩子",
    "男朋友 女朋友",
    "老公 老婆",
    "前 后",
    "之前 之后",
    "以前 以后",
    "早 晚",
    "早上 晚上",
    "上午 下午",
    "白天 晚上",
    "东 西 南 北",
    "左 右",
    "今天 明天 昨天 后天 前天",
    "今年 去年 明年",
    "本月 上月 下月",
    "这个月 上个月 下个月",
    "本周 上周 下周",
    "春天 夏天 秋天 冬天",
    "红色 蓝色 绿色 黄色 黑色 白色 紫色 粉色",
)

# word → the groups it belongs to (a word may sit in two: "关闭" contrasts with 打开 and 开启).
CONTRASTS: dict[str, frozenset[int]] = {}
for _group_id, _group in enumerate(_CONTRAST_GROUPS):
    for _word in _group.split():
        CONTRASTS[_word] = CONTRASTS.get(_word, frozenset()) | {_group_id}
POLAR_WORDS = frozenset(CONTRASTS)


def contrast(a: str, b: str) -> bool:
    """Whether two different lexicon words share a contrast group."""
    return a != b and not CONTRASTS.get(a, frozenset()).isdisjoint(CONTRASTS.get(b, frozenset()))


# --- function words and markers --------------------------------------------------------------

# Tokens that never carry what is asked: particles, "please", fillers. Left out of the order
# and of the skeleton (they go to `function`).
FUNCTION_WORDS = _words(
    "的 了 吗 呢 吧 啊 呀 嘛 哦 么 着 过 地 得 之 请 请问 一下 麻烦 你好 您好 谢谢 是 在 "
    "这 那 这个 那个 就 都 也 又 很 挺 太 啦 哈 嗯 呗 诶 呃 哎 哇 额"
)
# Coordinators: the words on either side play one symmetric role ("A和B的区别").
COORDINATORS = _words("和 与 跟 及 以及 或 或者 还是 同")
# Prepositions and verbs that give the words around them a direction. (marker → roles of the
# words before and after it; "" for a side the marker does not name).
DIRECTION_MARKERS: dict[str, tuple[str, str]] = {
    "从": ("", "source"),
    "由": ("", "source"),
    "自": ("", "source"),
    "到": ("source", "goal"),
    "至": ("source", "goal"),
    "往": ("", "goal"),
    "向": ("", "goal"),
    "去": ("", "goal"),
    "换成": ("source", "goal"),
    "兑换成": ("source", "goal"),
    "兑换": ("source", "goal"),
    "换": ("source", "goal"),
    "转成": ("source", "goal"),
    "转换成": ("source", "goal"),
    "转换为": ("source", "goal"),
    "转为": ("source", "goal"),
    "变成": ("source", "goal"),
    "改成": ("source", "goal"),
    "翻译成": ("source", "goal"),
    "比": ("compared", "standard"),
    "给": ("giver", "recipient"),
    "借给": ("giver", "recipient"),
    "送给": ("giver", "recipient"),
    "转给": ("giver", "recipient"),
    "卖给": ("giver", "recipient"),
    "打给": ("giver", "recipient"),
    "发给": ("giver", "recipient"),
    "欠": ("debtor", "creditor"),
}
# 把 fronts the object before its verb; 被 fronts the patient and names the agent after it
# (让 and 叫 can mean "let" and "call", so they are not read as passives).
BA = _words("把 将")
BEI = _words("被")

# Idioms jieba tags as numerals ("一下" = "a moment", "十分" = "very", "万一" = "in case").
NUMERAL_IDIOMS = _words(
    "一下 一些 一起 一点 一点点 一样 一直 一定 一般 一切 一旦 一边 一向 一会 一会儿 一番 一致 "
    "一律 一共 十分 万一 千万 百分百 一一 一再 一同 一时 一度 一手 一经 一道 一面 一口气 "
    "五一 十一 双十一 一体 统一 唯一 一生 一辈子"
)
