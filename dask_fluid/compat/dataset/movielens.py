"""Paddle 1.8's ``paddle.dataset.movielens``: MovieLens 1M ratings with user and movie features.

The archive ``ml-1m.zip`` is cached under ``DATA_HOME/movielens/`` as
``movielens%2Fml-1m.zip``. Its members ``ml-1m/movies.dat``
(``MovieID::Title (Year)::Genre|Genre``), ``ml-1m/users.dat``
(``UserID::Gender::Age::Occupation::Zip-code``) and ``ml-1m/ratings.dat``
(``UserID::MovieID::Rating::Timestamp``) are latin-1 text, one record a line.

As in Paddle 1.8 on Python 3:

- the movies, the users and the two dictionaries are read once per process, into the module
  attributes :data:`MOVIE_INFO` (movie id to :class:`MovieInfo`), :data:`USER_INFO` (user id to
  :class:`UserInfo`), :data:`MOVIE_TITLE_DICT` (lower-cased title word to id) and
  :data:`CATEGORIES_DICT` (genre to id); set :data:`MOVIE_INFO` back to None to read another
  archive. A title is the text before ``(year)``, the space before it included; its words are
  split on whitespace, so ``"Children, The"`` gives the words ``children,`` and ``the``.
- :func:`train` and :func:`test` split the ratings at random: every line of ``ratings.dat``, in
  order, draws ``u`` uniform in ``[0, 1)`` from a generator seeded with ``rand_seed``; the line is
  a test sample when ``u < test_ratio``, a training sample otherwise. The same seed gives the
  same split, and :func:`train` and :func:`test` with the same arguments are complementary.
- a sample is the list ``[user id, gender, age, job id, movie id, category ids, title word ids,
  [score]]``: gender 0 for male and 1 for female, age the index of the user's age group in
  :data:`age_table`, category and title ids lists of ints, and ``score = rating * 2 - 5.0`` (a
  float, -3.0 to 5.0).

Deviations, each where Paddle's behaviour is an accident of its implementation:

- the dictionaries number words and genres in the order of their first appearance in
  ``movies.dat``. Paddle numbers them in the iteration order of a ``set`` of strings, which
  Python 3 randomises per process (``PYTHONHASHSEED``), so its ids differed from run to run and
  between the processes of one job.
- the split uses a generator of its own, ``numpy.random.RandomState(rand_seed)``, which draws the
  same numbers Paddle's ``numpy.random.seed(rand_seed)`` then ``numpy.random.random()`` per line
  do, so the split is Paddle's. Paddle reseeded numpy's global generator instead, which changed
  the random numbers of the rest of the program and mixed up the splits of two readers iterated
  at the same time.
- blank lines are skipped (a blank line of ``ratings.dat`` still draws its number, as in Paddle,
  so the split of the other lines is unchanged); Paddle fails on them. A line with the wrong
  number of fields or a title without a year raises a ValueError naming the member and line.
"""

from __future__ import annotations

import numbers
import re
import zipfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from ...sample_readers import Reader
from . import common

__all__ = [
    "CATEGORIES_DICT",
    "MOVIE_INFO",
    "MOVIE_TITLE_DICT",
    "USER_INFO",
    "MovieInfo",
    "UserInfo",
    "age_table",
    "fetch",
    "get_movie_title_dict",
    "max_job_id",
    "max_movie_id",
    "max_user_id",
    "movie_categories",
    "movie_info",
    "test",
    "train",
    "user_info",
]

#: the lower bounds of the MovieLens age groups; a user's age is its index here
age_table = [1, 18, 25, 35, 45, 50, 56]

URL = "https://dataset.bj.bcebos.com/movielens%2Fml-1m.zip"
MD5 = "c4d9eecfca2ab87c1945afe126590906"

MOVIES_FILENAME = "ml-1m/movies.dat"
USERS_FILENAME = "ml-1m/users.dat"
RATINGS_FILENAME = "ml-1m/ratings.dat"

_TITLE_PATTERN = re.compile(r"^(.*)\((\d+)\)$")
# Random numbers are drawn this many at a time: the same stream as one call per line, faster.
_DRAW_CHUNK = 4096

# Filled by the first function that reads the archive (see the module docstring).
MOVIE_INFO: dict[int, MovieInfo] | None = None
MOVIE_TITLE_DICT: dict[str, int] | None = None
CATEGORIES_DICT: dict[str, int] | None = None
USER_INFO: dict[int, UserInfo] | None = None


def _loaded(name: str, value: dict | None) -> dict:
    if value is None:
        raise RuntimeError(
            f"movielens.{name} is not loaded yet; call paddle.dataset.movielens.movie_info() "
            "(or any reader) first."
        )
    return value


class MovieInfo:
    """A movie of ``movies.dat``.

    Parameters
    ----------
    index : int or str
        The movie id.
    categories : list of str
        Its genres.
    title : str
        Its title without the year (Paddle keeps the space before the year).

    Attributes
    ----------
    index : int
    categories : list of str
    title : str
    """

    def __init__(self, index: int | str, categories: list[str], title: str) -> None:
        self.index = int(index)
        self.categories = categories
        self.title = title

    def value(self) -> list[Any]:
        """Return ``[movie id, category ids, title word ids]``, ids from the loaded dictionaries.

        Raises
        ------
        RuntimeError
            If the dictionaries are not loaded yet (Paddle fails with a TypeError).
        KeyError
            If a genre or word is not in them.
        """
        categories = _loaded("CATEGORIES_DICT", CATEGORIES_DICT)
        titles = _loaded("MOVIE_TITLE_DICT", MOVIE_TITLE_DICT)
        return [
            self.index,
            [categories[c] for c in self.categories],
            [titles[w.lower()] for w in self.title.split()],
        ]

    def __str__(self) -> str:
        return f"<MovieInfo id({self.index}), title({self.title}), categories({self.categories})>"

    def __repr__(self) -> str:
        return self.__str__()


class UserInfo:
    """A user of ``users.dat``.

    Parameters
    ----------
    index : int or str
        The user id.
    gender : str
        ``"M"`` or ``"F"``; anything but ``"M"`` counts as female, as in Paddle.
    age : int or str
        The lower bound of the user's age group, one of :data:`age_table`.
    job_id : int or str
        The occupation, 0 to 20 in the published data.

    Attributes
    ----------
    index : int
    is_male : bool
    age : int
        The index of the age group in :data:`age_table`.
    job_id : int

    Raises
    ------
    ValueError
        If ``age`` is not in :data:`age_table`.
    """

    def __init__(self, index: int | str, gender: str, age: int | str, job_id: int | str) -> None:
        self.index = int(index)
        self.is_male = gender == "M"
        try:
            self.age = age_table.index(int(age))
        except ValueError:
            raise ValueError(
                f"User {self.index}: age {age} is not a MovieLens age group {age_table}."
            ) from None
        self.job_id = int(job_id)

    def value(self) -> list[int]:
        """Return ``[user id, gender (0 male, 1 female), age group index, job id]``."""
        return [self.index, 0 if self.is_male else 1, self.age, self.job_id]

    def __str__(self) -> str:
        return (
            f"<UserInfo id({self.index}), gender({'M' if self.is_male else 'F'}), "
            f"age({age_table[self.age]}), job({self.job_id})>"
        )

    def __repr__(self) -> str:
        return str(self)


def _fields(lines: IO[bytes], member: str, count: int) -> Iterator[list[str] | None]:
    """Split each latin-1 line of ``member`` on ``::``; None for a blank line."""
    for number, raw in enumerate(lines, 1):
        line = raw.decode("latin-1").strip()
        if not line:
            yield None
            continue
        fields = line.split("::")
        if len(fields) != count:
            raise ValueError(
                f"{member} line {number}: expected {count} fields separated by '::', got "
                f"{len(fields)}: {line!r}"
            )
        yield fields


def _read_movies(
    package: zipfile.ZipFile,
) -> tuple[dict[int, MovieInfo], dict[str, int], dict[str, int]]:
    movies: dict[int, MovieInfo] = {}
    # dicts as ordered sets: ids follow first appearance (see the module docstring)
    title_words: dict[str, None] = {}
    categories: dict[str, None] = {}
    with package.open(MOVIES_FILENAME) as movie_file:
        for number, fields in enumerate(_fields(movie_file, MOVIES_FILENAME, 3), 1):
            if fields is None:
                continue
            movie_id, title, genres = fields
            genre_list = genres.split("|")
            categories.update(dict.fromkeys(genre_list))
            match = _TITLE_PATTERN.match(title)
            if match is None:
                raise ValueError(
                    f"{MOVIES_FILENAME} line {number}: the title {title!r} does not end with "
                    "'(year)'."
                )
            title = match.group(1)
            movies[int(movie_id)] = MovieInfo(index=movie_id, categories=genre_list, title=title)
            title_words.update(dict.fromkeys(w.lower() for w in title.split()))
    return (
        movies,
        {w: i for i, w in enumerate(title_words)},
        {c: i for i, c in enumerate(categories)},
    )


def _read_users(package: zipfile.ZipFile) -> dict[int, UserInfo]:
    users: dict[int, UserInfo] = {}
    with package.open(USERS_FILENAME) as user_file:
        for fields in _fields(user_file, USERS_FILENAME, 5):
            if fields is not None:
                uid, gender, age, job, _ = fields
                users[int(uid)] = UserInfo(index=uid, gender=gender, age=age, job_id=job)
    return users


def _initialize_meta_info() -> str:
    """Download the archive if needed, read the movies and users unless loaded; return its path."""
    global MOVIE_INFO, MOVIE_TITLE_DICT, CATEGORIES_DICT, USER_INFO
    fn = common.download(URL, "movielens", MD5)
    if MOVIE_INFO is None:
        with zipfile.ZipFile(fn) as package:
            movies, title_dict, categories_dict = _read_movies(package)
            users = _read_users(package)
        MOVIE_TITLE_DICT, CATEGORIES_DICT, USER_INFO = title_dict, categories_dict, users
        # set last: once MOVIE_INFO is set, so are the others, even if reading failed before
        MOVIE_INFO = movies
    return fn


def _uniform(rng: np.random.RandomState) -> Iterator[float]:
    while True:
        yield from rng.random_sample(_DRAW_CHUNK).tolist()


def _reader(rand_seed: Any, test_ratio: float, is_test: bool) -> Iterator[list[Any]]:
    fn = _initialize_meta_info()
    movies, users = _loaded("MOVIE_INFO", MOVIE_INFO), _loaded("USER_INFO", USER_INFO)
    draws = _uniform(np.random.RandomState(rand_seed))
    with zipfile.ZipFile(fn) as package, package.open(RATINGS_FILENAME) as rating_file:
        for fields in _fields(rating_file, RATINGS_FILENAME, 4):
            # one draw for every line, blank or not, as Paddle draws
            if (next(draws) < test_ratio) != is_test or fields is None:
                continue
            uid, mov_id, rating, _ = fields
            score = float(rating) * 2 - 5.0
            yield users[int(uid)].value() + movies[int(mov_id)].value() + [[score]]


def _reader_creator(rand_seed: Any, test_ratio: float, is_test: bool) -> Reader:
    if isinstance(test_ratio, bool) or not isinstance(test_ratio, numbers.Real):
        raise TypeError(f"test_ratio must be a real number, got {test_ratio!r}.")
    # checked now rather than when the reader runs
    try:
        np.random.RandomState(rand_seed)
    except (TypeError, ValueError) as err:
        raise type(err)(
            f"rand_seed must be a seed numpy.random.RandomState accepts, got {rand_seed!r}: {err}"
        ) from err

    def reader() -> Iterator[list[Any]]:
        return _reader(rand_seed, test_ratio, is_test)

    return reader


def train(*, rand_seed: Any = 0, test_ratio: float = 0.1) -> Reader:
    """The training ratings: those the seeded draw does not put in the test set.

    Arguments are keyword-only, as in Paddle (a ``functools.partial`` over ``**kwargs``). The
    archive is downloaded and read when the reader is first iterated.

    Parameters
    ----------
    rand_seed : int, array-like of ints or None, default 0
        Seed of the split's generator (anything :class:`numpy.random.RandomState` takes; None
        gives a different split at each iteration).
    test_ratio : float, default 0.1
        Probability that a rating is a test sample.

    Returns
    -------
    callable
        A reader yielding ``[user id, gender, age, job id, movie id, category ids, title word
        ids, [score]]`` (see the module docstring).

    Raises
    ------
    TypeError
        If ``test_ratio`` is not a number, or ``rand_seed`` is not of a seed's type.
    ValueError
        If ``rand_seed`` is out of range (negative, or ``2**32`` or more).
    """
    return _reader_creator(rand_seed, test_ratio, is_test=False)


def test(*, rand_seed: Any = 0, test_ratio: float = 0.1) -> Reader:
    """The test ratings: those whose draw is below ``test_ratio``, see :func:`train`."""
    return _reader_creator(rand_seed, test_ratio, is_test=True)


def get_movie_title_dict() -> dict[str, int]:
    """The dictionary of lower-cased title words, :data:`MOVIE_TITLE_DICT` itself."""
    _initialize_meta_info()
    return _loaded("MOVIE_TITLE_DICT", MOVIE_TITLE_DICT)


def max_movie_id() -> int:
    """The largest movie id of ``movies.dat``."""
    _initialize_meta_info()
    return max(_loaded("MOVIE_INFO", MOVIE_INFO))


def max_user_id() -> int:
    """The largest user id of ``users.dat``."""
    _initialize_meta_info()
    return max(_loaded("USER_INFO", USER_INFO))


def max_job_id() -> int:
    """The largest job id of ``users.dat``."""
    _initialize_meta_info()
    return max(u.job_id for u in _loaded("USER_INFO", USER_INFO).values())


def movie_categories() -> dict[str, int]:
    """The dictionary of genres, :data:`CATEGORIES_DICT` itself."""
    _initialize_meta_info()
    return _loaded("CATEGORIES_DICT", CATEGORIES_DICT)


def user_info() -> dict[int, UserInfo]:
    """The users by id, :data:`USER_INFO` itself."""
    _initialize_meta_info()
    return _loaded("USER_INFO", USER_INFO)


def movie_info() -> dict[int, MovieInfo]:
    """The movies by id, :data:`MOVIE_INFO` itself."""
    _initialize_meta_info()
    return _loaded("MOVIE_INFO", MOVIE_INFO)


def fetch() -> None:
    """Download ``ml-1m.zip`` into the cache unless it is there."""
    common.download(URL, "movielens", MD5)
